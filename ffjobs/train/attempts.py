"""A run's training attempts: ``<run>/train/attempts.jsonl`` and the MLflow run, the same way
for a SLURM job the supervisor retried and for a local launch that ``ffjobs run --resume`` or an
Airflow retry started again."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from ffjobs.errors import UserError
from ffjobs.runs.run import Run
from ffjobs.slurm.failures import Failure
from ffjobs.slurm.jobstate import JobState
from ffjobs.slurm.supervisor import AttemptRecord, AttemptResult, attempt_record, goodput
from ffjobs.tracking.mlflow_logger import RunLogger
from ffjobs.tracking.spool import logged_steps

PROGRESS_METRIC = "lr"
"""A metric rank 0 logs at every logging step: the highest step it has is how far a local
attempt got (to the last logging step before a crash)."""


def attempts_file(run: Run) -> Path:
    return run.stage_dir("train") / "attempts.jsonl"


def read_attempts(run: Run) -> list[dict[str, Any]]:
    """The run's attempt log, one JSON object a line (data only: a line that is not one is
    refused by name, never run)."""
    path = attempts_file(run)
    if not path.exists():
        return []
    entries = []
    text = path.read_bytes().decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            raise UserError(
                f"{path}:{number}: not an attempt record (a JSON object a line); the run's "
                "attempt log was altered"
            )
        entries.append(entry)
    return entries


def record_attempt(run: Run, logger: RunLogger, attempt: AttemptRecord) -> None:
    """One line of the attempt log; its metrics (at step = attempt number) and tag in MLflow."""
    with attempts_file(run).open("a") as out:
        out.write(json.dumps(attempt.to_dict(), default=str) + "\n")
    logger.log_metrics(
        {"attempt_steps_lost": attempt.steps_lost, "attempt_seconds_lost": attempt.seconds_lost},
        step=attempt.number,
    )
    what = attempt.job_id or ",".join(attempt.nodes)
    logger.set_tags({f"ffjobs.attempt.{attempt.number}": f"{what} {attempt.summary}"})


def attempt_records(run: Run) -> list[AttemptRecord]:
    """Every attempt the run's log holds, oldest first: the run's attempt budget is counted
    from these, whoever supervised them."""
    tuples = ("nodes", "excluded", "evidence", "suspect_nodes")
    return [
        AttemptRecord(
            **{**entry, "state": JobState(entry["state"]), **{k: tuple(entry[k]) for k in tuples}}
        )
        for entry in read_attempts(run)
    ]


def run_goodput(run: Run) -> float:
    """Goodput over every attempt the run's log holds (see ``supervisor.goodput``)."""
    return goodput(attempt_records(run))


def local_attempt(
    run: Run,
    *,
    started_at: float,
    start_step: int,
    failure: Failure | None,
    final_step: int | None = None,
) -> AttemptRecord:
    """The record of a local launch of the ranks that just ended (``failure``: why, as the
    ranks' logs classify it; None for a success).

    A failed launch reached the last step rank 0 logged; its newest verified checkpoint is
    where the next attempt starts.
    """
    from ffjobs.train.checkpoint import open_checkpoints

    ref = open_checkpoints(run.config, run.checkpoint_dir).latest_verified()
    if failure is not None and final_step is None:
        final_step = logged_steps(run.tracking_dir).get(PROGRESS_METRIC)
    result = AttemptResult(
        job_id=None,
        nodes=(socket.gethostname().split(".")[0],),
        state=JobState.FAILED if failure else JobState.SUCCEEDED,
        exit_code=1 if failure else 0,
        start_step=start_step,
        final_step=final_step,
        checkpoint_step=ref.step if ref else None,
        started_at=started_at,
        ended_at=time.time(),
    )
    return attempt_record(len(read_attempts(run)) + 1, result, failure)
