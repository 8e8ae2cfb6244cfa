"""The DAG's preflight and training on the SLURM mini-cluster through a real Airflow (all four
components, LocalExecutor), driven only through REST API v2: the preflight and train tasks
defer (no worker slot while their jobs run), one MLflow run holds the training's job ids, and
marking the deferred task failed cancels the job within seconds, with nothing submitted after
it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from airflow_stack import DAG_ID, EVALUATION_ENCODER, AirflowStack, write_evaluation_encoder
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"
STEPS = 6
TINY = [
    *TINY_MODEL,
    "model.identity_weights=null",  # a random frozen encoder: no pre-training in the jobs
    "data.synth.identities=10",  # 2 held out (val_fraction 0.2) for the evaluation
    "data.synth.per_identity=4",
    "train.batch_size=2",
    "train.checkpoint_every=2",
    "train.log_every=1",
    "train.init_timeout_s=60",
    "train.collective_timeout_s=30",
    "slurm.retry_backoff_s=1",
    "slurm.time_min=5",
    "evaluate.gate.min_ssim=0",  # a few steps cannot pass the quality floor; the wiring is checked
    f"evaluate.identity_weights={EVALUATION_ENCODER}",
]
# Each task starts an interpreter that imports Airflow and ffjobs, the job queues and starts
# two ranks on the nodes, evaluate and register load the model: minutes on two busy cores.
RUN_TIMEOUT_S = 1500


@pytest.fixture(scope="module")
def slurm_airflow(local_stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """Airflow of this module's own, with the mini-cluster's environment (SLURM_CONF, ...) in
    every component: the worker submits, the triggerer polls ``sacct``."""
    root = tmp_path_factory.mktemp("airflow-slurm")
    stack = AirflowStack(root / "home", root / "work", extra_env=dict(local_stack))
    try:
        stack.start()
        write_evaluation_encoder(stack.workdir)
        yield stack
    finally:
        stack.stop()


def trigger(stack: AirflowStack, steps: int = STEPS, extra: tuple[str, ...] = ()) -> str:
    conf = {"config": "clusters/minicluster", "train_steps": steps, "overrides": [*TINY, *extra]}
    assert stack.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    status, body = stack.post(RUNS, {"logical_date": None, "conf": conf})
    assert status in (200, 201), body
    return body["dag_run_id"]


def task_states(stack: AirflowStack, run_id: str) -> dict[str, str | None]:
    status, body = stack.get(f"{RUNS}/{run_id}/taskInstances")
    assert status == 200, body
    return {ti["task_id"]: ti["state"] for ti in body["task_instances"]}


def wait_for(stack: AirflowStack, run_id: str, done, what: str, timeout: float = RUN_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        states = task_states(stack, run_id)
        if done(states):
            return states
        status, body = stack.get(f"{RUNS}/{run_id}")
        if body["state"] in ("success", "failed") and not done(states):
            raise AssertionError(f"DAG run {run_id} ended {body['state']} before {what}: {states}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {states}"
        time.sleep(2)


def run_record(stack: AirflowStack) -> dict:
    """The newest run's record in the stack's working folder."""
    paths = sorted((stack.workdir / "runs").glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(paths[-1].read_text())


def sacct(*args: str) -> list[str]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", *args], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return [line for line in out.splitlines() if line.strip()]


def test_training_defers_holding_no_worker_and_the_run_succeeds(slurm_airflow):
    stack = slurm_airflow
    run_id = trigger(stack)
    wait_for(stack, run_id, lambda s: s.get("train") == "deferred", "train to defer", 900)
    status, pool = stack.get("/api/v2/pools/default_pool")
    assert status == 200, pool
    assert pool["running_slots"] == 0, pool  # the deferred task holds no worker slot
    states = wait_for(
        stack, run_id, lambda s: s.get("register") in ("success", "failed", "upstream_failed"),
        "the run's end",
    )  # fmt: skip
    assert states == dict.fromkeys(("validate", "preflight", "train", "evaluate", "register"),
                                   "success"), states  # fmt: skip
    record = run_record(stack)
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
    record = run_record(stack)
    (job_id,) = [job["job_id"] for job in record["slurm_jobs"]]
    # a kill reaches a trigger the triggerer runs: wait until it has taken up the watch
    owner = stack.workdir / "runs" / record["key"] / "train" / "slurm-owner.json"
    deadline = time.monotonic() + 120
    while "watcher" not in (json.loads(owner.read_text()) if owner.exists() else {}):
        assert time.monotonic() < deadline, "the triggerer never took up the job's watch"
        time.sleep(0.5)
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
