"""Faults of the SLURM path, drilled through a real Airflow (all four components, LocalExecutor,
driven only through REST API v2) and the mini-cluster:

* a rank killed mid-training, with the triggerer restarted while the task is deferred: one
  Airflow try, the restart cancels nothing and the new triggerer takes up the watch, the
  retry is a second SLURM job and the final weights are bitwise those of a straight run;
* the worker process killed the moment ``sbatch`` has queued the job (before the task could
  note the job id or defer): the next try re-attaches to that job, one job in all;
* a fatal failure (user code) fails the task for good with its one-line reason, and a failure
  on every attempt spends the run's budget once, whatever the task's ``retries``.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_stack import AirflowStack, write_evaluation_encoder
from slurm_dag import (
    STEPS,
    TINY,
    attempts,
    cancel_jobs,
    run_record,
    sacct,
    task_instance,
    trigger,
    wait_for,
    wait_for_end,
    wait_for_watch,
)
from train.helpers import final_weights  # tests/ is on sys.path (rootdir conftest)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BITWISE = ("train.deterministic=true", "train.precision=fp32", "train.keep_checkpoints=10")
ARMED = "kill-after-sbatch"
"""A file in the stack's root: while it is there, the next training job's ``sbatch`` kills
the process that called it (and takes the file away)."""

SBATCH_SHIM = """#!/bin/sh
# sbatch as the cluster's; when {armed} is there (taken away atomically: one kill), the process
# that submitted a training attempt is SIGKILLed the moment sbatch has queued its job
out=$({sbatch} "$@") || exit $?
echo "$out"
for script; do :; done
if grep -q 'ffjobs run .* attempt [0-9]' "$script" 2>/dev/null \\
        && mv {armed} {armed}.fired 2>/dev/null; then
    kill -9 $PPID
fi
"""


@pytest.fixture(scope="module")
def drills_airflow(local_stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """Airflow with the mini-cluster's environment, one thread per rank (the jobs' and the
    straight run's sums in the same order: bitwise equality is a claim here), a retry five
    seconds after a failed try, and ``sbatch`` behind the shim above."""
    root = tmp_path_factory.mktemp("airflow-drills")
    shims = root / "bin"
    shims.mkdir()
    sbatch = shims / "sbatch"
    sbatch.write_text(SBATCH_SHIM.format(sbatch=shutil.which("sbatch"), armed=root / ARMED))
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    env = {
        **local_stack,
        "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
        "OMP_NUM_THREADS": "1",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
    }
    stack = AirflowStack(root / "home", root / "work", extra_env=env)
    try:
        stack.start()
        write_evaluation_encoder(stack.workdir)
        yield stack
    finally:
        stack.stop()
        cancel_jobs(stack)


def straight_weights(stack: AirflowStack, tmp_path: Path, monkeypatch, *extra: str) -> dict:
    """The DAG run's training without faults, as two local ranks on the dataset the DAG run
    validated: the reference weights."""
    from ffjobs.config import load_config
    from ffjobs.train.launch import launch_local

    monkeypatch.chdir(stack.workdir)  # where the DAG run's relative paths point
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    sets = [*TINY, *extra, f"train.steps={STEPS}", "slurm.executor=local", "slurm.nodes=1"]
    config = load_config("clusters/minicluster", sets)
    launch_local(config, 2, data="dataset", checkpoint_dir=str(tmp_path / "straight"),
                 quiet_stdout=True)  # fmt: skip
    return final_weights(tmp_path / "straight")


def test_killed_rank_and_restarted_triggerer_one_try_two_jobs_bitwise(
    drills_airflow, tmp_path, monkeypatch
):
    import torch

    stack = drills_airflow
    release = "release-killed-rank"  # every rank waits at step 2 until it exists
    run_id = trigger(stack, extra=(*BITWISE, "train.faults.pause_at_step=2",
                                   f"train.faults.pause_until_file={release}",
                                   "train.faults.kill_rank=1", "train.faults.kill_at_step=5"))  # fmt: skip
    wait_for(stack, run_id, lambda s: s.get("train") == "deferred", "train to defer", 900)
    record = run_record(stack, run_id)
    (first_job,) = [job["job_id"] for job in record["slurm_jobs"]]
    first_watcher = wait_for_watch(stack, record["key"])

    stack.restart("triggerer")
    # the new triggerer takes the watch up again (run() starts afresh); nothing was cancelled
    wait_for_watch(stack, record["key"], other_than=first_watcher)
    assert task_instance(stack, run_id, "train")["state"] == "deferred"
    assert sacct("-j", first_job, "-o", "State") == ["RUNNING"]

    (stack.workdir / release).touch()
    assert wait_for_end(stack, run_id) == "success"
    train = task_instance(stack, run_id, "train")
    assert train["try_number"] == 1  # one Airflow try: the retry was the operator's own
    record = run_record(stack, run_id)
    jobs = [job["job_id"] for job in record["slurm_jobs"]]
    assert sacct("--name", record["key"], "-o", "JobID") == jobs and len(jobs) == 2
    assert jobs[0] == first_job
    first, second = attempts(record)
    assert first["job_id"] == first_job and first["retryable"] and first["suspect_nodes"], first
    assert second["kind"] is None and second["final_step"] == STEPS
    assert not set(second["nodes"]) & set(first["suspect_nodes"])

    ours = final_weights(Path(record["checkpoint_dir"]))
    reference = straight_weights(stack, tmp_path, monkeypatch, *BITWISE)
    assert ours["step"] == reference["step"] == STEPS
    for net in ("generator", "discriminator", "ema"):
        for name, tensor in reference[net].items():
            assert torch.equal(ours[net][name], tensor), f"{net}.{name} differs"


def test_worker_killed_right_after_sbatch_the_next_try_reattaches(drills_airflow):
    stack = drills_airflow
    armed = stack.home.parent / ARMED
    armed.touch()
    run_id = trigger(stack)
    assert wait_for_end(stack, run_id) == "success"
    assert not armed.exists() and armed.with_name(f"{ARMED}.fired").exists()  # it did fire
    train = task_instance(stack, run_id, "train")
    assert train["try_number"] == 2  # the killed try, then the one that re-attached
    record = run_record(stack, run_id)
    (job,) = [job["job_id"] for job in record["slurm_jobs"]]
    assert sacct("--name", record["key"], "-o", "JobID") == [job]  # never submitted again
    (only,) = attempts(record)
    assert only["job_id"] == job and only["number"] == 1 and only["kind"] is None


def test_fatal_failures_are_not_retried_and_the_budget_is_spent_once(drills_airflow):
    stack = drills_airflow
    fatal = trigger(stack, extra=("train.faults.raise_rank=0", "train.faults.raise_at_step=3"))
    every = trigger(stack, extra=("train.faults.raise_in_collective_at_step=3",
                                  "train.faults.every_time=true", "slurm.max_attempts=2"))  # fmt: skip
    for run_id, jobs in ((fatal, 1), (every, 2)):
        assert wait_for_end(stack, run_id) == "failed"
        train = task_instance(stack, run_id, "train")
        # failed for good on its first try although the task has a retry left
        assert (train["state"], train["try_number"]) == ("failed", 1), train
        record = run_record(stack, run_id)
        assert len(sacct("--name", record["key"], "-o", "JobID")) == jobs == len(attempts(record))
        assert record["status"] == "failed"
    (bug,) = attempts(run_record(stack, fatal))
    assert bug["kind"] == "user_code" and not bug["retryable"], bug
    logs = stack.all_logs()
    assert "train failed: not retryable: ValueError on rank 0" in logs
    spent = attempts(run_record(stack, every))
    assert all(a["retryable"] for a in spent) and "attempt budget of 2 spent" in logs
