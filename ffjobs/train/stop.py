"""A request to stop training cleanly: a signal asks, the ranks agree, the loop checkpoints.

SLURM and submitit signal a job before its time limit or a pre-emption (``--signal``,
USR1/USR2), and SIGTERM comes first on ``scancel`` and node drains. The handler only sets a
flag; the training loop reads it at its next logging step, where every rank agrees on it
(one all-reduce), so all ranks write the same checkpoint and stop at the same step.
"""

from __future__ import annotations

import contextlib
import signal
import sys

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class StopRequest:
    """Whether this rank was asked to stop; :meth:`agree` makes it every rank's answer."""

    def __init__(self, rank: int):
        self.rank = rank
        self.requested = False

    def install(self) -> None:
        """Handle :data:`STOP_SIGNALS` by setting :attr:`requested` (main thread only)."""
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not in the main thread
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        print(
            f"rank {self.rank}: got signal {signum}; will checkpoint and stop",
            file=sys.stderr,
            flush=True,
        )
        self.requested = True

    def agree(self, device: torch.device, world_size: int) -> bool:
        """Collective: True on every rank if any rank was asked (signals reach ranks at
        different steps); the answer is kept in :attr:`requested`."""
        if world_size > 1:
            flag = torch.tensor([1.0 if self.requested else 0.0], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            self.requested = bool(flag.item())
        return self.requested
