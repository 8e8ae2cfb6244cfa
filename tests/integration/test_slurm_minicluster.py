"""Jobs on the real SLURM mini-cluster through submitit, with final states read from sacct."""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest
from sacct_wait import wait_for_final_state

from ffjobs.config import load_config
from ffjobs.slurm.executor import make_executor

pytestmark = pytest.mark.integration

# The tasks unpickle these functions on the nodes; ship them by value rather than by module path.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def node_name() -> str:
    return os.environ["SLURMD_NODENAME"]


def sleep_then_return(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@pytest.fixture
def two_node_config(tmp_path, local_stack):
    """Two nodes of the ``debug`` partition, one CPU task on each."""

    def build(*overrides: str):
        return load_config(None, [
            "slurm.executor=slurm", "slurm.partition=debug", "slurm.nodes=2",
            "slurm.tasks_per_node=1", "slurm.cpus_per_task=1", "slurm.mem_gb=0.5",
            "slurm.time_min=5", f"slurm.folder={tmp_path}", *overrides,
        ])  # fmt: skip

    return build


def wait_until_running(job, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while job.state != "RUNNING":
        assert not job.done(), f"job {job.job_id} ended before running: {job.state}"
        assert time.monotonic() < deadline, f"job {job.job_id} still {job.state}"
        time.sleep(0.5)


def test_two_node_job_reports_both_nodes_and_completes_in_sacct(two_node_config):
    executor = make_executor(two_node_config(), run_id="it-two-nodes", attempt=0)
    job = executor.submit(node_name)
    names = job.results()
    assert len(names) == 2 and len(set(names)) == 2, names
    assert all(name.startswith("node") for name in names)
    record = wait_for_final_state(job.job_id, timeout_s=60)
    assert record.state == "COMPLETED" and record.exit_code == 0
    assert sorted(record.nodes) == sorted(names)


def test_cancelled_running_job_is_cancelled_in_sacct(two_node_config):
    executor = make_executor(two_node_config(), run_id="it-cancel", attempt=0)
    job = executor.submit(sleep_then_return, 300)
    wait_until_running(job)
    job.cancel(check=True)
    record = wait_for_final_state(job.job_id, timeout_s=60)
    assert record.state == "CANCELLED", record.raw_state


def test_two_node_job_runs_with_one_node_excluded(two_node_config):
    executor = make_executor(
        two_node_config("slurm.exclude=[node1]"), run_id="it-exclude", attempt=0
    )
    job = executor.submit(node_name)
    assert sorted(job.results()) == ["node2", "node3"]
    assert wait_for_final_state(job.job_id, timeout_s=60).state == "COMPLETED"
