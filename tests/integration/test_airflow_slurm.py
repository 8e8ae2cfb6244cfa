"""The DAG's preflight and training on the SLURM mini-cluster through a real Airflow (all four
components, LocalExecutor), driven only through REST API v2:

* the preflight and train tasks defer (no worker slot while their jobs run), one MLflow run
  holds the training's job ids;
* marking the deferred task failed cancels the job within seconds, with nothing submitted
  after it;
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
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_stack import (
    DAG_RUN_TIMEOUT_S,
    RUNS,
    AirflowStack,
    wait_for_end,
    write_evaluation_encoder,
)
from slurm_dag import (
    DAG_ID,
    STEPS,
    TINY,
    attempts,
    cancel_jobs,
    run_record,
    sacct,
    task_instance,
    trigger,
    wait_for,
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
def slurm_airflow(local_stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """Airflow of this module's own with the mini-cluster's environment (SLURM_CONF, ...) in
    every component (the worker submits, the triggerer polls ``sacct``), one thread per rank
    (the jobs' and the straight run's sums in the same order: bitwise equality is a claim
    here), a retry five seconds after a failed try, and ``sbatch`` behind the shim above."""
    root = tmp_path_factory.mktemp("airflow-slurm")
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


def test_training_defers_holding_no_worker_and_the_run_succeeds(slurm_airflow):
    stack = slurm_airflow
    run_id = trigger(stack)
    wait_for(stack, run_id, lambda s: s.get("train") == "deferred", "train to defer", 900)
    status, pool = stack.get("/api/v2/pools/default_pool")
    assert status == 200, pool
    assert pool["running_slots"] == 0, pool  # the deferred task holds no worker slot
    states = wait_for(
        stack, run_id, lambda s: s.get("review") in ("skipped", "failed", "upstream_failed"),
        "the run's end",
    )  # fmt: skip
    tasks = ("validate", "compare_inputs", "preflight", "train", "evaluate", "register")
    assert states == {**dict.fromkeys(tasks, "success"), "review": "skipped"}, states
    record = run_record(stack, run_id)
    jobs = [job["job_id"] for job in record["slurm_jobs"]]
    assert len(jobs) == 1
    assert sacct("--name", record["key"], "-o", "JobID") == jobs  # one training job, ever

    # the preflight deferred too: its task paused as DEFERRED, a trigger in the triggerer
    # watched the job the task kept until it fired, and that one job ran under the run's
    # preflight name
    status, body = stack.get(f"{RUNS}/{run_id}/taskInstances/preflight/state-store")
    assert status == 200, body
    (kept,) = [entry["value"] for entry in body["task_state_store"] if entry["key"] == "slurm_job"]
    logs = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=preflight"
    assert "Pausing task as DEFERRED" in (logs / "attempt=1.log").read_text(errors="replace")
    fired = "".join(p.read_text(errors="replace") for p in logs.glob("attempt=1.log.trigger.*"))
    assert "Trigger fired event" in fired and f"'job_id': '{kept['job_id']}'" in fired, fired
    preflight_jobs = sacct("--name", f"{record['key']}-preflight", "-o", "JobID,State")
    assert preflight_jobs == [f"{kept['job_id']}|COMPLETED"], preflight_jobs
    assert kept["job_id"] not in jobs

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=record["tracking_uri"])  # the mini-cluster's server
    run = client.get_run(record["mlflow_run_id"])
    assert run.data.tags["slurm.job_ids"] == jobs[0]
    assert run.data.tags["ffjobs.train"] == "passed"


def test_marking_the_deferred_task_failed_cancels_its_job(slurm_airflow):
    stack = slurm_airflow
    # a job that runs long enough to be killed: every rank waits at step 2 for a file that
    # never comes
    run_id = trigger(stack, extra=("train.faults.pause_at_step=2",
                                   "train.faults.pause_until_file=never-there"))  # fmt: skip
    wait_for(stack, run_id, lambda s: s.get("train") == "deferred", "train to defer", 900)
    record = run_record(stack, run_id)
    (job_id,) = [job["job_id"] for job in record["slurm_jobs"]]
    wait_for_watch(stack, record["key"])  # a kill reaches a trigger the triggerer runs
    status, body = stack.patch(f"{RUNS}/{run_id}/taskInstances/train", {"new_state": "failed"})
    assert status == 200, body
    marked = time.monotonic()
    while True:
        lines = sacct("-j", job_id, "-o", "State")  # none while accounting lags the submission
        if lines and lines[-1].startswith("CANCELLED"):
            break
        assert time.monotonic() - marked < 30, f"job {job_id} still {lines} 30 s after the kill"
        time.sleep(1)
    time.sleep(5)  # nothing may follow it
    assert sacct("--name", record["key"], "-o", "JobID") == [job_id]
    # the ranks stopped on SIGTERM without a requeue, and the trigger said who cancelled
    assert not [run for run in sacct("-D", "-j", job_id, "-o", "State") if "REQUEUED" in run]
    from ffjobs.slurm.cancels import read_note

    (folder,) = stack.workdir.glob(f"**/attempt-1/{job_id}")
    note = read_note(folder, job_id)
    assert note is not None and not note.ours, note
    assert note.by.startswith("an Airflow kill of task ffjobs_pipeline.train (run "), note


def test_killed_rank_and_restarted_triggerer_one_try_two_jobs_bitwise(
    slurm_airflow, tmp_path, monkeypatch
):
    import torch

    stack = slurm_airflow
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
    assert wait_for_end(stack, run_id, DAG_RUN_TIMEOUT_S) == "success"
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


def test_worker_killed_right_after_sbatch_the_next_try_reattaches(slurm_airflow):
    stack = slurm_airflow
    armed = stack.home.parent / ARMED
    armed.touch()
    run_id = trigger(stack)
    assert wait_for_end(stack, run_id, DAG_RUN_TIMEOUT_S) == "success"
    assert not armed.exists() and armed.with_name(f"{ARMED}.fired").exists()  # it did fire
    train = task_instance(stack, run_id, "train")
    assert train["try_number"] == 2  # the killed try, then the one that re-attached
    record = run_record(stack, run_id)
    (job,) = [job["job_id"] for job in record["slurm_jobs"]]
    assert sacct("--name", record["key"], "-o", "JobID") == [job]  # never submitted again
    (only,) = attempts(record)
    assert only["job_id"] == job and only["number"] == 1 and only["kind"] is None


def test_fatal_failures_are_not_retried_and_the_budget_is_spent_once(slurm_airflow):
    stack = slurm_airflow
    fatal = trigger(stack, extra=("train.faults.raise_rank=0", "train.faults.raise_at_step=3"))
    every = trigger(stack, extra=("train.faults.raise_in_collective_at_step=3",
                                  "train.faults.every_time=true", "slurm.max_attempts=2"))  # fmt: skip
    for run_id, jobs in ((fatal, 1), (every, 2)):
        assert wait_for_end(stack, run_id, DAG_RUN_TIMEOUT_S) == "failed"
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
