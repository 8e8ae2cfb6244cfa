"""Fault-injection hooks for recovery drills; every hook is a no-op unless configured.

Steps are 1-based: ``kill_at_step: 7`` means the rank dies as it starts its 7th optimizer step,
after step 6 (and any checkpoint taken there) has completed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from ffjobs.train.config import FaultInjection
from ffjobs.train.storage import CheckpointStore


class InjectedFault(RuntimeError):
    """Raised on purpose by a drill."""


class FaultInjector:
    """Applies the drills of :class:`FaultInjection` to one rank."""

    def __init__(self, config: FaultInjection, rank: int):
        self.config = config
        self.rank = rank
        self.step = 0

    def before_step(self, step: int) -> None:
        """Called as ``step`` starts: kill or hang this rank if a drill says so."""
        self.step = step
        cfg = self.config
        if cfg.kill_rank == self.rank and cfg.kill_at_step == step:
            print(f"[fault] rank {self.rank}: SIGKILL at step {step}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.hang_rank == self.rank and cfg.hang_at_step == step:
            print(f"[fault] rank {self.rank}: hanging at step {step}", file=sys.stderr, flush=True)
            while True:  # stop participating; peers block in their next collective
                time.sleep(3600)

    def wrap_comm_hook(self, hook: Any) -> Any:
        """A DDP comm hook that raises from inside the all-reduce at the configured step."""
        target = self.config.raise_in_collective_at_step
        if target is None:
            return hook

        def faulty_hook(state, bucket):  # no annotations: DDP checks them (ours are strings)
            if self.step == target:
                raise InjectedFault(f"injected failure inside all-reduce at step {self.step}")
            return hook(state, bucket)

        return faulty_hook

    def after_checkpoint(self, store: CheckpointStore, name: str) -> None:
        """Corrupt the checkpoint just written (flip bytes in its middle) if configured."""
        if not self.config.corrupt_latest_checkpoint or self.rank != 0:
            return
        corrupt_blob(store, name)
        print(f"[fault] corrupted {store.describe(name)}", file=sys.stderr, flush=True)


def corrupt_blob(store: CheckpointStore, name: str, mode: str = "flip") -> None:
    """Damage a stored blob: ``flip`` inverts 16 bytes in its middle, ``truncate`` halves it."""
    data = bytearray(store.read(name))
    if mode == "truncate":
        store.write(name, bytes(data[: len(data) // 2]))
        return
    middle = len(data) // 2
    for i in range(middle, min(middle + 16, len(data))):
        data[i] ^= 0xFF
    store.write(name, bytes(data))
