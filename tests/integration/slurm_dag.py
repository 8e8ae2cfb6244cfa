"""Driving the DAG on the SLURM mini-cluster through a real Airflow's REST API v2: trigger a
DAG run of a tiny training with the ``clusters/minicluster`` profile, watch its task instances,
read its run's record and ask SLURM accounting about its jobs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_stack import (  # noqa: F401 - the DAG run helpers, for this module's tests
    DAG_ID,
    EVALUATION_ENCODER,
    RUNS,
    AirflowStack,
    dag_run_state,
    task_instance,
    task_states,
    trigger_dag_run,
    wait_for,
    wait_for_end,
    xcom_value,
)
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

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
    # a few steps cannot pass the quality floor nor beat the unchanged target's retrieval
    # (reached or not by chance: 8 held-out pairs); the wiring is checked
    "evaluate.gate.min_ssim=0",
    "evaluate.gate.min_identity_top1=0",
    f"evaluate.identity_weights={EVALUATION_ENCODER}",
    "registry.review_timeout_h=0",  # no reviewer here: the review task is skipped
]
ENDED = ("success", "failed", "upstream_failed", "skipped")


def trigger(stack: AirflowStack, steps: int = STEPS, extra: tuple[str, ...] = ()) -> str:
    conf = {"config": "clusters/minicluster", "train_steps": steps, "overrides": [*TINY, *extra]}
    return trigger_dag_run(stack, conf)


def run_dir(stack: AirflowStack, run_id: str) -> Path:
    """The run directory of DAG run ``run_id`` (the validate task's XCom)."""
    return stack.workdir / xcom_value(stack, run_id, "validate", "run_dir")


def run_record(stack: AirflowStack, run_id: str | None = None) -> dict[str, Any]:
    """The record of DAG run ``run_id``'s run (default: the newest run in the working folder)."""
    if run_id is not None:
        path = run_dir(stack, run_id) / "run.json"
    else:
        runs = (stack.workdir / "runs").glob("*/run.json")
        path = sorted(runs, key=lambda p: p.stat().st_mtime)[-1]
    record = json.loads(path.read_text())
    for folder in ("run_dir", "checkpoint_dir"):  # relative to the working folder
        record[folder] = str(stack.workdir / record[folder])
    return record


def cancel_jobs(stack: AirflowStack) -> None:
    """Cancel every SLURM job of the runs in the stack's working folder (a test that failed
    half-way leaves its jobs to nobody)."""
    for run in (stack.workdir / "runs").glob("*/run.json"):
        subprocess.run(["scancel", "--name", run.parent.name], capture_output=True, check=False)


def wait_for_watch(stack: AirflowStack, key: str, *, other_than: str | None = None) -> str:
    """The trigger watching run ``key``'s training job, once a triggerer has taken it up (its
    id in the run's owner file), and one other than ``other_than`` if given."""
    owner = stack.workdir / "runs" / key / "train" / "slurm-owner.json"
    deadline = time.monotonic() + 180
    while True:
        watcher = (json.loads(owner.read_text()) if owner.exists() else {}).get("watcher")
        if watcher is not None and watcher != other_than:
            return watcher
        assert time.monotonic() < deadline, f"no triggerer took up run {key}'s job"
        time.sleep(0.5)


def sacct(*args: str) -> list[str]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", *args], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return [line for line in out.splitlines() if line.strip()]


def attempts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's attempt records (one line per SLURM job it accounted for)."""
    log = Path(record["run_dir"]) / "train" / "attempts.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
