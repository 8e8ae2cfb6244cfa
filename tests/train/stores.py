"""Checkpoint stores that stall a data-file write, for the asynchronous checkpoint tests.

They live in a module of their own: the writer process unpickles its store, so the class must
be importable there. They coordinate with the test through files, across processes.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ffjobs.train.checkpoint import data_name
from ffjobs.train.checkpoint.storage import LocalStore


def wait_for(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


class GatedStore(LocalStore):
    """Data files of steps after the first are written only once the file ``gate`` exists."""

    def __init__(self, directory: str | Path, gate: str | Path):
        super().__init__(directory)
        self.gate = Path(gate)

    def write(self, name: str, data: bytes | memoryview) -> None:
        if name.endswith(".pt") and name != data_name(1):
            wait_for(self.gate)
        super().write(name, data)


class HalfWritingStore(LocalStore):
    """Writes half of step 2's data file into the hidden temporary file, touches ``marker``,
    and stalls there (until killed)."""

    def __init__(self, directory: str | Path, marker: str | Path):
        super().__init__(directory)
        self.marker = Path(marker)

    def write(self, name: str, data: bytes | memoryview) -> None:
        if name != data_name(2):
            return super().write(name, data)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, _ = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.", suffix=".tmp")
        os.write(fd, data[: len(data) // 2])
        os.fsync(fd)
        self.marker.touch()
        time.sleep(600)


class FullStore(LocalStore):
    """A folder that is full from step 2 on: writing a data file fails as the disk says
    (ENOSPC), through :class:`LocalStore`'s own handling of it."""

    def _write(self, name: str, data: bytes | memoryview) -> None:
        if name.endswith(".pt") and name != data_name(1):
            import errno

            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super()._write(name, data)
