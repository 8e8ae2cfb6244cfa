"""A one-line progress display on stderr: redrawn on a terminal, occasional lines in logs."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """``progress(done, total)`` callback; silent for short runs that are not on a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None, log_every_s: float = 10.0):
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.log_every_s = log_every_s
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.tty:
            if now - self.last < 0.1 and done < total:
                return
            end = "\n" if done >= total else ""
        elif now - self.last < self.log_every_s or now - self.started < self.log_every_s:
            return  # in logs, only long runs report, every log_every_s
        else:
            end = "\n"
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        percent = 100 * done / total if total else 100
        self.stream.write(f"\r{self.label}: {done}/{total} ({percent:.0f}%, {rate:.0f}/s){end}")
        self.stream.flush()
