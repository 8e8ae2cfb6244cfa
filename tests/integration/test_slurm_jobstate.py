"""Two plain sbatch jobs on the real SLURM mini-cluster, polled together with ``poll_jobs``."""

from __future__ import annotations

import time

import pytest

from ffjobs.slurm.accounting import run_command
from ffjobs.slurm.jobstate import JobState, JobStatus, poll_jobs

pytestmark = pytest.mark.integration


def sbatch(script: str, out_dir) -> str:
    """Submit a one-node, one-CPU batch job; its id (``--parsable`` may append ``;cluster``)."""
    argv = ["sbatch", "--parsable", "-p", "debug", "-N", "1", "-n", "1", "--mem=256M", "-t", "2",
            "-o", f"{out_dir}/%j.out", "--wrap", script]  # fmt: skip
    return run_command(argv).strip().split(";")[0]


def poll_until_terminal(job_ids: list[str], timeout_s: float = 120.0) -> dict[str, JobStatus]:
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = poll_jobs(job_ids)
        if all(status.is_terminal for status in statuses.values()):
            return statuses
        assert time.monotonic() < deadline, f"not finished after {timeout_s:.0f} s: {statuses}"
        time.sleep(1.0)


def test_completed_and_failed_jobs_reach_their_ffjobs_states(tmp_path, local_stack):
    succeeding = sbatch("true", tmp_path)
    failing = sbatch("exit 3", tmp_path)
    statuses = poll_until_terminal([succeeding, failing])

    done, failed = statuses[succeeding], statuses[failing]
    assert done.state is JobState.SUCCEEDED and done.slurm_state == "COMPLETED", done
    assert done.exit_code == 0 and done.nodes, done
    assert failed.state is JobState.FAILED and failed.slurm_state == "FAILED", failed
    assert failed.exit_code == 3, failed
