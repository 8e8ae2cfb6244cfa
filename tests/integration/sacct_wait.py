"""Waiting for a mini-cluster job's final accounting record, for tests that read what sacct kept."""

from __future__ import annotations

import time

from ffjobs.slurm.accounting import JobAccounting, parse_sacct_output, run_command
from ffjobs.slurm.jobstate import sacct_argv


def wait_for_final_state(job_id: str | int, timeout_s: float = 60.0) -> JobAccounting:
    """Poll ``sacct`` until the job's record is final and settled (accounting lags the scheduler;
    a requeued job has a line per run, the last is the latest)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = [r for r in parse_sacct_output(run_command(sacct_argv([str(job_id)])))
                   if r.job_id == str(job_id)]  # fmt: skip
        record = records[-1] if records else None
        if record is not None and record.settled:
            return record
        if time.monotonic() >= deadline:
            state = record.raw_state if record else "no accounting record"
            raise TimeoutError(f"job {job_id} not finished after {timeout_s:.0f} s ({state})")
        time.sleep(1.0)
