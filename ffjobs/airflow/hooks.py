"""What the SLURM trigger asks of the cluster and of the run's folders, without blocking.

Every call is an asyncio subprocess through the one command runner
(:func:`ffjobs.slurm.accounting.run_command_async`) or a file read on a worker thread, so one
triggerer watches many jobs: a blocking call would stall every trigger it runs. One ``sacct``
call per poll; accounting that does not know the job yet (it lags right after ``sbatch``) is
an answer of its own (``None``), never an error. ``squeue`` is not asked about the job's state:
it forgets a job minutes after its end.

The run's *owner file* of a stage (``<run>/<stage>/slurm-owner.json``: ``train``,
``preflight``) says which job the run's task of that stage watches now and which try and
trigger watch it: a trigger cancels a job on kill only when the file still names that job, its
try and itself (see :class:`~ffjobs.airflow.triggers.SlurmJobTrigger`). Standard library and
ffjobs only: the triggerer imports this module.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from ffjobs.slurm import rank_failures
from ffjobs.slurm.accounting import AccountingError, run_command_async
from ffjobs.slurm.jobstate import JobStatus, sacct_argv, sacct_status

OWNER_FILE = "slurm-owner.json"


class SlurmHook:
    """The triggerer's window on SLURM and the run's folders; each call is one poll's worth."""

    async def status(self, job_id: str) -> JobStatus | None:
        """The job's state per one ``sacct`` call; None while accounting does not know it."""
        return sacct_status(await run_command_async(sacct_argv([job_id])), job_id)

    async def cancel(self, job_id: str) -> None:
        await run_command_async(["scancel", job_id])

    async def failure_reports(self, folder: str, job_id: str) -> list[dict[str, Any]]:
        """The rank failure reports of the job's current run (:mod:`ffjobs.slurm.rank_failures`).

        The folder is looked at on a worker thread; ``scontrol`` (the job's restart count) is
        asked only when a report is there."""
        found = await asyncio.to_thread(lambda: sorted(Path(folder).glob(f"{job_id}_*_failed-*")))
        if not found:
            return []
        scontrol = await run_command_async(["scontrol", "show", "job", "-o", job_id])
        return await asyncio.to_thread(
            rank_failures.current_reports, Path(folder), job_id, lambda _argv: scontrol
        )

    async def nodes_still_completing(self, job_id: str) -> tuple[str, ...]:
        """:func:`ffjobs.slurm.rank_failures.nodes_still_completing`, asynchronously."""
        try:
            out = await run_command_async(rank_failures.completing_argv(job_id))
        except AccountingError:  # squeue no longer knows the job: it has ended everywhere
            return ()
        return rank_failures.completing_nodes(out)


def owner_file(run_dir: str | Path, stage: str = "train") -> Path:
    """The owner file of the run's SLURM job of ``stage`` (each stage's task watches its own)."""
    return Path(run_dir) / stage / OWNER_FILE


def read_owner(path: str | Path) -> dict[str, Any]:
    """The owner file's record; ``{}`` when there is none or it does not read."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_owner(path: str | Path, record: dict[str, Any]) -> None:
    """Replace the owner file atomically (owner-only, as the run directory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    partial.replace(path)


def claim_watch(path: str | Path, job_id: str, token: str, watcher: str) -> bool:
    """Note ``watcher`` (one run of a trigger) as the one watching ``job_id`` for the try that
    ``token`` names; False (nothing written) when the file names another job or try."""
    record = read_owner(path)
    if record.get("job_id") != job_id or record.get("token") != token:
        return False
    write_owner(path, {**record, "watcher": watcher})
    return True


def owns(path: str | Path, job_id: str, token: str, watcher: str) -> bool:
    """Whether the owner file still names ``job_id``, the try ``token`` and ``watcher``."""
    record = read_owner(path)
    return (record.get("job_id"), record.get("token"), record.get("watcher")) == (
        job_id,
        token,
        watcher,
    )
