"""A request to stop training cleanly: a signal asks, the ranks agree, the loop checkpoints.

SLURM and submitit signal a job before its time limit or a pre-emption (``--signal``,
USR1/USR2), and SIGTERM comes first on ``scancel``. The handler only sets a flag; the training
loop reads it at its next logging step, where every rank agrees on it (one all-reduce), so all
ranks write the same checkpoint and stop at the same step.

The ranks also agree on why (:attr:`StopRequest.requeue`): USR1/USR2 come ahead of a
pre-emption or the time limit, and the job is to go on after its checkpoint (submitit requeues
it, :mod:`ffjobs.train.slurm_job`); SIGTERM is a cancel (``scancel``, an Airflow kill, Ctrl-C on
``ffjobs train --submit --wait``, which cancels its job), and the job stops after its
checkpoint. A SIGTERM on any rank wins: a person's cancel is never undone by a requeue.

A rank stuck in a collective (its peer hung or died) can never get there, and SIGTERM is also
what ``srun --kill-on-bad-exit`` and torch's elastic agent send to the survivors of a failed
rank: they would sit until SIGKILL (SLURM's ``KillWait``, 30 s by default; the agent's 30 s),
and a retry waits with them. So once the loop runs, a watchdog thread hears SIGTERM through
the signal wakeup fd (it is written by the C-level handler even while the main thread is
blocked inside a C++ collective, where no Python handler can run) and, if no training step
starts within a grace of a few step times, exits the rank at once with 128 + SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
"""Sent ahead of a pre-emption or the time limit: checkpoint, stop, and the job goes on."""
MIN_GRACE_S = 1.0
"""Shortest wait for a step after SIGTERM before a rank counts as stuck."""
UNKNOWN_STEP_GRACE_S = 30.0
"""The wait before any step time is known (the first steps compile): SLURM's default KillWait."""


class StopRequest:
    """Whether this rank was asked to stop; :meth:`agree` makes it every rank's answer."""

    def __init__(self, rank: int):
        self.rank = rank
        self.requested = False
        self.requeue = False
        """Whether the stop is ahead of a pre-emption or the time limit (USR1/USR2 only, on
        every rank that was signalled): the job is to go on after its checkpoint. False for a
        cancel (SIGTERM)."""
        self._cancelled = False
        self._ended = False  # the loop is over: the rank is ending on its own
        self._steps = 0
        self._step_starts: list[float] = []
        self._busy = 0
        self._watching = False
        self._previous: dict[signal.Signals, Any] = {}  # the handlers install() replaced
        self._previous_wakeup_fd: int | None = None
        self._wakeup_write_fd: int | None = None

    def install(self) -> None:
        """Handle :data:`STOP_SIGNALS` by setting :attr:`requested` (main thread only)."""
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not in the main thread
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        """Give the signals back to the handlers :meth:`install` found (a caller that trains
        in its own process gets its SIGTERM back once training has ended)."""
        self._ended = True
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._previous_wakeup_fd is not None:
            signal.set_wakeup_fd(self._previous_wakeup_fd)  # the watchdog hears no more
            self._previous_wakeup_fd = None
        if self._wakeup_write_fd is not None:  # its pipe's end: the watchdog returns
            os.close(self._wakeup_write_fd)
            self._wakeup_write_fd = None

    def step_started(self) -> None:
        """Called by the training loop as each step starts (main thread): arms the watchdog."""
        self._steps += 1
        self._step_starts = [*self._step_starts[-20:], time.monotonic()]
        # only while this request holds the signals (install() in the main thread, until
        # uninstall()): a loop driven without them (a test, a benchmark) leaves the process's
        # wakeup fd alone, and a watchdog left behind could end a process that trains no more
        if not self._watching and self._previous:
            self._watching = True
            self._watch_for_sigterm()

    @contextlib.contextmanager
    def busy(self):
        """Work between steps that may outlast the grace (a checkpoint write): not stuck."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    def grace_s(self) -> float:
        """How long a live rank may take to start its next step: three median step times."""
        gaps = [b - a for a, b in zip(self._step_starts[1:], self._step_starts[2:], strict=False)]
        if not gaps:  # the first step's time is compile and warm-up, not a step time
            return UNKNOWN_STEP_GRACE_S
        return max(MIN_GRACE_S, 3 * statistics.median(gaps))

    def _watch_for_sigterm(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            self._previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            self._wakeup_write_fd = write_fd
        except ValueError:  # not the main thread: no watchdog, the plain handler still works
            os.close(read_fd)
            os.close(write_fd)
            return
        watchdog = threading.Thread(
            target=self._watchdog, args=(read_fd,), name="ffjobs-stop-watchdog", daemon=True
        )
        watchdog.start()

    def _watchdog(self, read_fd: int) -> None:
        while True:
            heard = os.read(read_fd, 64)
            if not heard or self._ended:  # uninstalled: training is over
                os.close(read_fd)
                return
            if signal.SIGTERM in heard:
                break
        grace, seen = self.grace_s(), self._steps
        time.sleep(grace)
        if self._steps == seen and not self._busy and not self._ended:
            print(
                f"rank {self.rank}: SIGTERM and no training step started within {grace:.1f} s: "
                "stuck in a collective with a failed peer; exiting now instead of at SIGKILL",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signal.SIGTERM)

    def _on_signal(self, signum: int, _frame: object) -> None:
        requeue = signum in REQUEUE_SIGNALS
        why = "ahead of a pre-emption or the time limit" if requeue else "a cancel: no requeue"
        print(
            f"rank {self.rank}: got signal {signum}; will checkpoint and stop ({why})",
            file=sys.stderr,
            flush=True,
        )
        self._cancelled = self._cancelled or not requeue
        self.requested = True
        self.requeue = not self._cancelled

    def agree(self, device: torch.device, world_size: int) -> bool:
        """Collective: True on every rank if any rank was asked (signals reach ranks at
        different steps); the answer is kept in :attr:`requested`, and why in
        :attr:`requeue` (a cancel on any rank makes it False on all)."""
        if world_size > 1:
            # 0: not asked; 1: asked to requeue; 2: cancelled (the highest wins)
            mine = 2.0 if self._cancelled else 1.0 if self.requested else 0.0
            flag = torch.tensor([mine], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            agreed = flag.item()
            self.requested, self._cancelled = agreed > 0, agreed > 1
            self.requeue = agreed == 1
        return self.requested
