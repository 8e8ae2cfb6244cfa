"""Ending a job whose rank has failed when SLURM cannot end it yet.

A rank that fails normally ends its job within a second or two: ``srun --kill-on-bad-exit``
stops the other tasks and the batch script returns. But when a node's link is down, its task
cannot be told to stop, and the step (and so the job) stays alive until the controller gives the
node up: ``SlurmdTimeout`` later, 300 s by SLURM's default. The ranks themselves knew after one
collective timeout. So each task that fails leaves word of it beside its logs
(:func:`report`); a supervisor that sees such a report while the job still runs cancels the job
(:func:`cancel`), and the nodes that have still not confirmed its end a moment later
(:func:`nodes_still_completing`) are the ones the controller cannot reach.

A report belongs to one run of the job: SLURM may requeue a job under the same id, so each report
carries the job's restart count (``SLURM_RESTART_COUNT``) and only those of the current run
count (:func:`current_reports`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ffjobs.slurm.accounting import AccountingError, Runner, run_command
from ffjobs.slurm.jobstate import JobState, JobStatus, parse_scontrol_line
from ffjobs.slurm.nodes import expand_nodelist

CANCEL_AFTER_S = 1.0
"""A job still alive this long after one of its ranks reported a failure is cancelled (a job
SLURM can end ends by itself within about a second: ``--kill-on-bad-exit``)."""
END_GRACE_S = 2.0
"""Once cancelled, the job's nodes get this long to confirm its end before the silent ones count
as lost (SIGTERM first: the ranks exit within a second, ``ffjobs.train.stop``)."""
END_WAIT_S = 10.0
"""At most this long after the cancel, the attempt ends whichever nodes have confirmed."""
FIRST_POLL_S = 2.0
"""The shortest wait between two polls of a job that is running quietly: a job watched for
``10 * poll_s`` or longer is polled every ``poll_s``, a younger one more often (down to this),
so that the end of a short job (a preflight, a failure at start-up) is seen within seconds."""


@dataclass(frozen=True)
class Ended:
    """The job has ended: its status, and the nodes that never confirmed the end (lost)."""

    status: JobStatus
    unconfirmed: tuple[str, ...] = ()


@dataclass
class EndWatch:
    """Watching one job to its end, one poll at a time: the same rules for the blocking
    supervisor and the Airflow trigger, which fetch what each step needs their own way.

    Before the cancel, a step takes the job's status and its rank failure reports
    (:func:`current_reports`): a job whose rank reported a failure but that is still alive
    :data:`CANCEL_AFTER_S` later is to be cancelled. After it, a step takes the status and the
    nodes still completing the job (:func:`nodes_still_completing`): once another node has
    confirmed the end (or after :data:`END_WAIT_S`), the silent ones are the nodes the
    controller cannot reach, and the job counts as ended without waiting for them.
    """

    cancelled_at: float | None = None
    started: float = field(default_factory=time.monotonic)
    """When the watch began (monotonic)."""

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None

    def before_cancel(
        self, status: JobStatus, reports: list[dict[str, Any]], now: float
    ) -> Ended | Literal["cancel", "wait"]:
        if status.is_terminal:
            return Ended(status)
        if reports and now - reports[0]["time"] >= CANCEL_AFTER_S:
            self.cancelled_at = now
            return "cancel"
        return "wait"

    def after_cancel(
        self, status: JobStatus, pending: tuple[str, ...], now: float
    ) -> Ended | Literal["wait"]:
        assert self.cancelled_at is not None, "after_cancel before the cancel"
        waited = now - self.cancelled_at
        confirmed = len(pending) < len(status.nodes)
        if (status.is_terminal and not pending) or (
            waited >= END_GRACE_S and (confirmed or waited >= END_WAIT_S)
        ):  # our cancel's exit code says nothing of the ranks that never reported
            ended = replace(
                status, state=JobState.CANCELLED, slurm_state="CANCELLED", exit_code=None
            )
            return Ended(ended, pending)
        return "wait"

    def interval(self, poll_s: float, reports: list[dict[str, Any]]) -> float:
        """Seconds to the next poll: short once something is happening; while the job runs
        quietly, a tenth of how long it has been watched, between :data:`FIRST_POLL_S` and
        ``poll_s``."""
        if self.cancelled or reports:
            return 0.5
        watched = time.monotonic() - self.started
        return min(poll_s, max(FIRST_POLL_S, watched / 10))


def _path(folder: Path, job_id: str, task: int, restart: int) -> Path:
    return folder / f"{job_id}_{task}_failed-{restart}.json"


def report(folder: Path, job_id: str, task: int, node: str, error: BaseException) -> None:
    """Record (atomically) that ``task`` of ``job_id`` ended with ``error``."""
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    record = {"time": time.time(), "task": task, "node": node, "restart": restart,
              "error": f"{type(error).__name__}: {error}"[:500]}  # fmt: skip
    path = _path(Path(folder), job_id, task, restart)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps(record))
    partial.replace(path)


def current_reports(
    folder: Path, job_id: str, runner: Runner = run_command
) -> list[dict[str, Any]]:
    """Failure reports of the job's current run, oldest first (``[]`` if none)."""
    found = sorted(Path(folder).glob(f"{job_id}_*_failed-*.json"))
    if not found:
        return []
    fields = parse_scontrol_line(runner(["scontrol", "show", "job", "-o", job_id]))
    restarts = int(fields.get("Restarts", "0") or 0)
    reports = []
    for path in found:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("restart") == restarts:
            reports.append(record)
    return sorted(reports, key=lambda r: r["time"])


def cancel(job_id: str, runner: Runner = run_command) -> None:
    runner(["scancel", job_id])


def nodes_still_completing(job_id: str, runner: Runner = run_command) -> tuple[str, ...]:
    """The nodes of a COMPLETING job that have not yet confirmed its end (``squeue`` lists only
    those for such a job); ``()`` once the job is gone or not completing."""
    try:
        out = runner(completing_argv(job_id))
    except AccountingError:  # squeue no longer knows the job: it has ended everywhere
        return ()
    return completing_nodes(out)


def completing_argv(job_id: str) -> list[str]:
    """The ``squeue`` call :func:`completing_nodes` reads."""
    return ["squeue", "-h", "-j", job_id, "-o", "%T|%N"]


def completing_nodes(squeue_output: str) -> tuple[str, ...]:
    """The nodes ``squeue`` lists as still completing the job (its only nodes once it is)."""
    for line in squeue_output.splitlines():
        state, _, nodelist = line.strip().partition("|")
        if state.upper().startswith("COMPLETING") and nodelist:
            return tuple(expand_nodelist(nodelist))
    return ()
