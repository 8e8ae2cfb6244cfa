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
from pathlib import Path
from typing import Any

from ffjobs.slurm.accounting import AccountingError, Runner, run_command
from ffjobs.slurm.jobstate import parse_scontrol_line
from ffjobs.slurm.nodes import expand_nodelist


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
        out = runner(["squeue", "-h", "-j", job_id, "-o", "%T|%N"])
    except AccountingError:  # squeue no longer knows the job: it has ended everywhere
        return ()
    for line in out.splitlines():
        state, _, nodelist = line.strip().partition("|")
        if state.upper().startswith("COMPLETING") and nodelist:
            return tuple(expand_nodelist(nodelist))
    return ()
