"""The tracking spool: what one writer process logged into a run, on the run's own disk first.

Every record a :class:`~ffjobs.tracking.mlflow_logger.RunLogger` is given is appended to
``<run dir>/tracking/spool-<writer>.jsonl`` (one JSON object a line, numbered by ``seq``, with
the metric's original timestamp and step) before anything is sent, so a tracking outage or a
crash loses nothing. Beside it, ``spool-<writer>.delivered`` holds the delivered watermark: the
``seq`` of the last record the tracking server accepted. Delivery is at least once: a crash
between the server's answer and the watermark's update sends those records again, which MLflow
takes as the same points (an identical key, value, timestamp and step is one metric point; a
param with the same value, a tag or an artifact is simply written again).

One writer appends to a spool (its name is unique to the process); any process may deliver it,
one at a time (:meth:`Spool.delivering` holds an exclusive lock). A last line without its
newline is a write the writer did not finish (it died): it is ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ffjobs.private_files import make_private_dir, open_private_append, write_private_text

SPOOL_DIR = "tracking"
"""The spools' folder inside a run directory."""


def writer_name(role: str) -> str:
    """A spool name unique to this process: ``<role>-<host>-<pid>-<4 hex>`` (a pid alone repeats
    across SLURM attempts and containers)."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{role}-{host}-{os.getpid()}-{secrets.token_hex(2)}"


class Spool:
    """One writer's records and how far they were delivered."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.watermark_path = self.path.with_suffix(".delivered")
        self._seq: int | None = None
        self._append_lock = threading.Lock()

    @classmethod
    def for_writer(cls, directory: Path, writer: str) -> Spool:
        return cls(Path(directory) / f"spool-{writer}.jsonl")

    def append(self, record: dict[str, Any]) -> int:
        """Write ``record`` (a JSON-ready dict) as the next line; return its ``seq``."""
        with self._append_lock:
            if self._seq is None:
                make_private_dir(self.path.parent)
                self._seq = max((seq for seq, _ in self.records()), default=0)
            self._seq += 1
            line = json.dumps({"seq": self._seq, **record}, separators=(",", ":")) + "\n"
            # one write of a whole line in append mode: a reader sees it whole or not at all
            with open_private_append(self.path) as out:
                out.write(line)
            return self._seq

    def records(self) -> list[tuple[int, dict[str, Any]]]:
        """Every complete record, in the order written: ``(seq, record)``."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines = text.split("\n")
        complete = lines[:-1]  # the part after the last newline is empty or a torn write
        out = []
        for line in complete:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn write followed by a later writer's line (not ours, but safe)
            out.append((int(record.pop("seq")), record))
        return out

    @property
    def delivered(self) -> int:
        """The ``seq`` of the last delivered record (0: none)."""
        try:
            return int(json.loads(self.watermark_path.read_text())["seq"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return 0

    def pending(self) -> list[tuple[int, dict[str, Any]]]:
        """Records past the delivered watermark, in order."""
        mark = self.delivered
        return [(seq, record) for seq, record in self.records() if seq > mark]

    def mark_delivered(self, seq: int) -> None:
        """Move the watermark to ``seq`` (atomically: a crash leaves the old or the new one)."""
        write_private_text(self.watermark_path, json.dumps({"seq": seq}) + "\n")

    @contextlib.contextmanager
    def delivering(self, *, wait: bool = True) -> Iterator[bool]:
        """Hold the spool's delivery lock; yields False (without it) if ``wait`` is False and
        another process is delivering it now."""
        make_private_dir(self.path.parent)
        with open_private_append(self.path.with_suffix(".lock")) as lock:
            flags = fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)
            try:
                fcntl.flock(lock, flags)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def run_spools(directory: Path) -> list[Spool]:
    """Every writer's spool in a run's tracking folder."""
    return [Spool(path) for path in sorted(Path(directory).glob("spool-*.jsonl"))]


def logged_steps(directory: Path) -> dict[str, int]:
    """The highest step of each metric that any writer of the run has logged so far."""
    highest: dict[str, int] = {}
    for spool in run_spools(directory):
        for _, record in spool.records():
            if record.get("kind") == "metrics":
                step = int(record["step"])
                for key in record["values"]:
                    highest[key] = max(step, highest.get(key, step))
    return highest
