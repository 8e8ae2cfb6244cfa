"""A background thread that ships one spool to the tracking server, so no training step waits
on the network: it backs off while the server is down, warns once when an outage starts and says
one line when delivery resumes."""

from __future__ import annotations

import random
import sys
import threading
import time
import warnings
from collections.abc import Callable

from ffjobs.tracking.redact import redact_text

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
"""Waits between delivery attempts while the server is down: doubling from 1 s to 30 s, each
drawn between half of that and all of it, so that the runs that lost one server do not all
retry in the same second when it returns."""
_JITTER = random.Random()
"""Seeded from the OS, apart from the global generator (which training seeds alike everywhere)."""


class TrackingWarning(UserWarning):
    """Tracking failed; the work continues without it (or spools until the server is back)."""


class Unavailable(Exception):
    """Delivery cannot work in this process at all (MLflow is not installed): stop trying."""


class Shipper:
    """Calls ``deliver()`` (send what is pending, raise on failure) whenever nudged, in a daemon
    thread; ``where`` names the server and spool in its messages."""

    def __init__(self, deliver: Callable[[], int], where: str, spool_path: str):
        self._deliver = deliver
        self.where, self.spool_path = where, spool_path
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.outage_since: float | None = None
        self.retry_at = 0.0
        self._backoff = BACKOFF_FIRST_S
        self.gave_up = False

    def nudge(self) -> None:
        """Something new is in the spool: ship it soon (at once unless in an outage)."""
        if self.gave_up:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="ffjobs-tracking", daemon=True
                )
                self._thread.start()
        self._idle.clear()
        self._wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for what is pending to go out; False if it did not (an
        outage: it stays in the spool). Never waits out an outage's backoff."""
        if self._thread is None or self.gave_up:
            return self._thread is None
        if self.outage_since is not None:
            self.retry_at = 0.0  # one more try now, then give the answer
        self._idle.clear()
        self._wake.set()
        return self._idle.wait(timeout_s) and self.outage_since is None

    def close(self, timeout_s: float) -> None:
        """Last delivery attempt, then stop the thread (waits at most ``timeout_s``)."""
        if self._thread is None:
            return
        self.retry_at = 0.0
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            wait = None if self.outage_since is None else max(0.0, self.retry_at - time.time())
            self._wake.wait(wait)
            self._wake.clear()
            stopping = self._stopping.is_set()
            if self.outage_since is not None and time.time() < self.retry_at and not stopping:
                continue  # backing off: new records wait in the spool
            self._attempt()
            if not self._wake.is_set():
                self._idle.set()  # nothing new arrived during the attempt
            if stopping or self.gave_up:
                self._idle.set()
                return

    def _attempt(self) -> None:
        try:
            self._deliver()
        except Unavailable as exc:
            self.gave_up = True
            _warn(f"{exc}; records stay in {self.spool_path} for the run's owner to deliver")
        except Exception as exc:  # the server is down or refused: spool and back off
            if self.outage_since is None:
                self.outage_since = time.time()
                _warn(
                    f"tracking server {self.where} unreachable ({_first_line(exc)}); the work "
                    f"goes on, records are kept in {self.spool_path} and sent when it is back"
                )
            else:
                self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
            self.retry_at = time.time() + self._backoff * _JITTER.uniform(0.5, 1.0)
            return
        if self.outage_since is not None:
            down = time.time() - self.outage_since
            print(
                f"tracking: delivery to {redact_text(self.where)} resumed after {down:.0f} s; spooled "
                "records sent",
                file=sys.stderr,
                flush=True,
            )
            self.outage_since, self._backoff = None, BACKOFF_FIRST_S


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _warn(message: str) -> None:
    warnings.warn(redact_text(message), TrackingWarning, stacklevel=2)
