"""A scheduled ``ffjobs_pipeline`` run on a real Airflow (all four components) and a real
MLflow server: the deployment's ``configs/schedule.yaml`` makes the dataset's Asset the DAG's
schedule, and an Asset event posted through REST API v2 makes the scheduler create an
``asset_triggered`` DAG run, as a dataset producer would.

A run triggered by hand trains and registers the challenger; a scheduled run on the same
dataset, config and code then stops after validation, the GPU stages skipped with the reason
(task log, XCom, MLflow); with ``force`` on (the schedule's default for it) it trains again.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_stack import (
    DAG_ID,
    EVALUATION_ENCODER,
    RUNS,
    AirflowStack,
    task_log,
    task_states,
    wait_for_end,
    write_evaluation_encoder,
    xcom_value,
)

from ffjobs.data.synth import generate_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GPU_STAGES = ("preflight", "train", "evaluate", "register")
STAGES = ("validate", "compare_inputs", *GPU_STAGES)
# Each task starts an interpreter that imports Airflow and ffjobs; preflight and train start
# torch ranks, evaluate and register load the model: minutes on two busy cores. A bound on a
# hang, not the expected time.
RUN_TIMEOUT_S = 1200
# The scheduler looks at queued Asset events once a loop (seconds); a minute is room for load.
SCHEDULED_RUN_TIMEOUT_S = 120
TINY = {
    "model": {"identity_weights": None},
    "train": {"steps": 4, "checkpoint_every": 2, "log_every": 2, "batch_size": 4},
    "slurm": {"tasks_per_node": 1},
    # 4 steps cannot pass the quality floor; the wiring is checked
    "evaluate": {
        "gate": {"min_ssim": 0, "min_identity_top1": 0},
        "identity_weights": EVALUATION_ENCODER,
    },
}


@pytest.fixture
def scheduled(airflow_stack: AirflowStack, mlflow_server) -> Iterator[dict[str, str]]:
    """A preset of its own (its model name, dataset folder and the test MLflow server) in the
    session stack's ``configs/``; the schedule file is removed again afterwards and the DAG
    re-parsed without a schedule, as the other tests of the session expect it."""
    stack, tag = airflow_stack, secrets.token_hex(4)
    names = {
        "preset": f"scheduled-{tag}",
        "model": f"ffjobs-scheduled-{tag}",
        "asset": f"s3://ffjobs-test-datasets/scheduled-{tag}",
    }
    preset = {
        "extends": "local",
        "name": names["preset"],
        **TINY,
        "data": {"source": f"data/scheduled-{tag}"},
        "tracking": {"tracking_uri": mlflow_server.uri},
        # no reviewer here: the review task is skipped
        "registry": {"model_name": names["model"], "review_timeout_h": 0},
    }
    # 10 identities, 2 held out (val_fraction 0.2) for the evaluation
    generate_dataset(stack.workdir / preset["data"]["source"], identities=10, per_identity=4)
    configs = stack.workdir / "configs"
    configs.mkdir(exist_ok=True)
    (configs / f"{names['preset']}.yaml").write_text(json.dumps(preset))  # JSON is YAML
    if not (stack.workdir / EVALUATION_ENCODER).exists():
        write_evaluation_encoder(stack.workdir)
    assert stack.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    try:
        yield names
    finally:
        (configs / "schedule.yaml").unlink(missing_ok=True)
        stack.reparse_dag(lambda dag: dag["asset_expression"] is None)


def write_schedule(stack: AirflowStack, names: dict[str, str], *, force: bool) -> None:
    """The deployment's schedule: a run when the dataset's Asset is updated; re-parsed."""
    schedule = {"dataset": names["asset"], "config": names["preset"], "force": force}
    (stack.workdir / "configs" / "schedule.yaml").write_text(json.dumps(schedule))
    stack.reparse_dag(
        lambda dag: (
            names["asset"] in json.dumps(dag["asset_expression"])
            and dag["params"]["force"]["value"] is force
        )
    )


def dataset_updated(stack: AirflowStack, uri: str) -> str:
    """Post an event of the dataset's Asset; return the DAG run the scheduler makes of it."""
    status, body = stack.get(f"/api/v2/assets?uri_pattern={uri.rsplit('/', 1)[-1]}")
    assert status == 200 and body["assets"], body
    (asset,) = [a for a in body["assets"] if a["uri"] == uri]
    before = set(scheduled_runs(stack))
    status, body = stack.post("/api/v2/assets/events", {"asset_id": asset["id"]})
    assert status in (200, 201), body
    deadline = time.monotonic() + SCHEDULED_RUN_TIMEOUT_S
    while not (new := set(scheduled_runs(stack)) - before):
        assert time.monotonic() < deadline, "the scheduler made no DAG run of the Asset event"
        time.sleep(2)
    (run_id,) = new
    return run_id


def scheduled_runs(stack: AirflowStack) -> list[str]:
    status, body = stack.get(f"{RUNS}?run_type=asset_triggered&limit=100")
    assert status == 200, body
    return [run["dag_run_id"] for run in body["dag_runs"]]


def trained_and_registered(stack: AirflowStack, run_id: str) -> str:
    """Wait for the DAG run; it ran every stage: return the version it registered."""
    state = wait_for_end(stack, run_id, RUN_TIMEOUT_S)
    states = task_states(stack, run_id)
    failed = {t: task_log(stack, run_id, t)[-3000:] for t in STAGES if states[t] != "success"}
    expected = {**dict.fromkeys(STAGES, "success"), "review": "skipped"}
    assert (state, states) == ("success", expected), failed
    return str(xcom_value(stack, run_id, "register", "registered_version"))


def mlflow_run(tracking_uri: str, run_id: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri).get_run(run_id)


@pytest.mark.timeout(3 * RUN_TIMEOUT_S + 600)  # three DAG runs, two parses, the stack's start
def test_a_scheduled_run_on_unchanged_inputs_skips_the_gpu_stages_and_force_trains(
    airflow_stack, scheduled, mlflow_server
):
    stack = airflow_stack
    write_schedule(stack, scheduled, force=False)

    # by hand, with the preset the schedule uses: it trains and registers the challenger
    status, body = stack.post(RUNS, {"logical_date": None, "conf": {"config": scheduled["preset"]}})
    assert status in (200, 201), body
    assert trained_and_registered(stack, body["dag_run_id"]) == "1"

    # the dataset is "updated" with the same content: the scheduled run stops after validation
    run_id = dataset_updated(stack, scheduled["asset"])
    assert run_id.startswith("asset_triggered__")
    assert wait_for_end(stack, run_id, RUN_TIMEOUT_S) == "success"
    states = task_states(stack, run_id)
    assert states == {
        "validate": "success",
        "compare_inputs": "skipped",
        **dict.fromkeys((*GPU_STAGES, "review"), "skipped"),
    }, task_log(stack, run_id, "compare_inputs")[-3000:]
    reason = xcom_value(stack, run_id, "compare_inputs", "skipped_reason")
    assert reason.startswith("inputs unchanged since version 1 (challenger): dataset fingerprint ")
    assert reason.endswith("; the force Param trains anyway")
    assert reason in task_log(stack, run_id, "compare_inputs")  # the grid's view of the task
    run = mlflow_run(mlflow_server.uri, xcom_value(stack, run_id, "validate", "mlflow_run_id"))
    assert run.info.status == "FINISHED"
    assert run.data.tags["ffjobs.unchanged"] == run.data.tags["mlflow.note.content"] == reason
    assert [run.data.tags[f"ffjobs.{s}"] for s in ("validate", *GPU_STAGES)] == [
        "passed",
        *["skipped"] * 4,
    ]
    run_dir = stack.workdir / xcom_value(stack, run_id, "validate", "run_dir")
    record = json.loads((Path(run_dir) / "run.json").read_text())
    assert record["unchanged"] == reason
    assert [s["name"] for s in record["stages"]] == ["validate"]

    # force (here the schedule's default for it): the same inputs train again
    write_schedule(stack, scheduled, force=True)
    forced = dataset_updated(stack, scheduled["asset"])
    assert trained_and_registered(stack, forced) == "2"
    assert "force is on" in task_log(stack, forced, "compare_inputs")
