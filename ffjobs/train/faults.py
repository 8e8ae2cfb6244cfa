"""Fault-injection hooks for recovery drills; every hook is a no-op unless configured.

Steps are 1-based: ``kill_at_step: 7`` means the rank dies as it starts its 7th optimizer step,
after step 6 (and any checkpoint taken there) has completed.

The step drills (kill, hang, raise in the all-reduce) fire once per training job: before firing,
a rank writes a marker (``drill-fired-<kind>.json``) next to the checkpoints, and a run that
finds the marker skips that drill. A restarted job (torchrun ``--max-restarts``, a SLURM requeue,
a pipeline retry) resumes below the drill's step and would otherwise fail again at the same
step. A marker rather than a restart counter: torchrun's ``TORCHELASTIC_RESTART_COUNT`` is per
node (an agent whose workers were healthy restarts them without counting), and the ranks may
be assigned to other nodes after a restart, so only shared storage gives every rank one answer.

The pause (``pause_at_step`` until ``pause_until_file`` exists) needs no marker: once the file
exists, a restarted job passes the step without waiting. A stop request (a signal) ends the pause
too, as it would reach a training loop: the rank trains the step, checkpoints and stops.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ffjobs.config.train import FaultInjection
from ffjobs.train.checkpoint.storage import CheckpointStore


class InjectedFault(RuntimeError):
    """Raised on purpose by a drill."""


STEP_DRILLS = ("kill", "hang", "raise_in_collective", "raise")
PAUSE_POLL_S = 0.1
"""How often a paused rank looks for the file that ends its pause."""


def marker_name(kind: str) -> str:
    """Name of the blob recording that the ``kind`` drill has fired in this checkpoint store."""
    return f"drill-fired-{kind}.json"


class FaultInjector:
    """Applies the drills of :class:`FaultInjection` to one rank.

    ``store`` is the checkpoint store that records fired drills; without one, the step drills
    fire in every run that reaches their step.
    """

    def __init__(self, config: FaultInjection, rank: int, store: CheckpointStore | None = None):
        self.config = config
        self.rank = rank
        self.store = store
        self.step = 0
        self.already_fired = self._fired_before()
        """Step drills that fired in an earlier run of this job (read once, at start-up, so
        every rank decides from the same state)."""

    def _configured(self) -> set[str]:
        cfg = self.config
        targets = {
            "kill": cfg.kill_at_step,
            "hang": cfg.hang_at_step,
            "raise_in_collective": cfg.raise_in_collective_at_step,
            "raise": cfg.raise_at_step,
        }
        return {kind for kind, step in targets.items() if step is not None}

    def _fired_before(self) -> set[str]:
        configured = self._configured()
        if self.store is None or not configured or self.config.every_time:
            return set()  # no drill, no look at the store
        names = set(self.store.list())
        return {kind for kind in configured if marker_name(kind) in names}

    def _arm(self, kind: str, step: int) -> bool:
        """Whether ``kind`` fires now; if so, record it first (the rank may not survive it)."""
        if kind in self.already_fired:
            print(
                f"[fault] rank {self.rank}: {kind} drill already fired in this job; skipped",
                file=sys.stderr,
                flush=True,
            )
            return False
        if self.store is not None and not self.config.every_time:
            record = {"kind": kind, "rank": self.rank, "step": step, "time": time.time()}
            self.store.write(marker_name(kind), json.dumps(record).encode())
        return True

    def before_step(self, step: int, stopping: Callable[[], bool] = lambda: False) -> None:
        """Called as ``step`` starts: pause, kill or hang this rank if a drill says so.
        ``stopping``: whether the rank was asked to stop (that ends a pause)."""
        self.step = step
        cfg = self.config
        if cfg.pause_at_step == step:
            self._pause(step, Path(cfg.pause_until_file), stopping)
        if cfg.kill_rank == self.rank and cfg.kill_at_step == step and self._arm("kill", step):
            print(f"[fault] rank {self.rank}: SIGKILL at step {step}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.hang_rank == self.rank and cfg.hang_at_step == step and self._arm("hang", step):
            print(f"[fault] rank {self.rank}: hanging at step {step}", file=sys.stderr, flush=True)
            while True:  # stop participating; peers block in their next collective
                time.sleep(3600)
        if cfg.raise_rank == self.rank and cfg.raise_at_step == step and self._arm("raise", step):
            print(f"[fault] rank {self.rank}: {cfg.raise_error} at step {step}", file=sys.stderr)
            if cfg.raise_error == "out_of_memory":
                import torch

                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB (injected at step "
                    f"{step} on rank {self.rank})"
                )
            raise ValueError(f"injected bug in the training step at step {step}")

    def _pause(self, step: int, until: Path, stopping: Callable[[], bool]) -> None:
        """Wait, between steps (no collective is open), until ``until`` exists or the rank is
        asked to stop."""
        if until.exists():
            return
        print(
            f"[fault] rank {self.rank}: paused at step {step} until {until} exists",
            file=sys.stderr,
            flush=True,
        )
        started = time.monotonic()
        while not until.exists() and not stopping():
            time.sleep(PAUSE_POLL_S)
        waited = time.monotonic() - started
        why = "; asked to stop" if stopping() else ""
        print(
            f"[fault] rank {self.rank}: going on with step {step} after {waited:.1f} s paused{why}",
            file=sys.stderr,
            flush=True,
        )

    def wrap_comm_hook(self, hook: Any) -> Any:
        """A DDP comm hook that raises from inside the all-reduce at the configured step."""
        target = self.config.raise_in_collective_at_step
        if target is None or "raise_in_collective" in self.already_fired:
            return hook

        def faulty_hook(state, bucket):  # no annotations: DDP checks them (ours are strings)
            if self.step == target and self._arm("raise_in_collective", self.step):
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
