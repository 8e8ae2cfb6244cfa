"""A model the evaluation gate blocks, in a real Airflow (all four components, LocalExecutor):
a decision, not a crash. evaluate succeeds with the verdict in its XCom and a link to the MLflow
run (a real server: a link that opens the model-training view), register is skipped, the DAG
run succeeds, and the scheduler writes the verdict as the DAG run's note, which the run's page
shows (headless Chromium)."""

from __future__ import annotations

import json
import time

import pytest
from airflow_stack import DAG_ID, EVALUATION_ENCODER, START_TIMEOUT_S, write_evaluation_encoder
from browser import AirflowPage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"
# Each task starts a fresh interpreter importing Airflow and ffjobs (tens of seconds on a busy
# two-core machine) and the tiny run trains 4 steps: a few minutes; fifteen bound a hang.
RUN_TIMEOUT_S = 900


@pytest.mark.timeout(START_TIMEOUT_S + RUN_TIMEOUT_S + 120)
def test_a_blocked_gate_is_a_decision_with_a_note(airflow_stack_page: AirflowPage, mlflow_server):
    from mlflow.tracking import MlflowClient

    stack = airflow_stack_page.stack
    if not (stack.workdir / EVALUATION_ENCODER).exists():  # the session's stack: maybe there
        write_evaluation_encoder(stack.workdir)
    (stack.workdir / "configs").mkdir(exist_ok=True)
    (stack.workdir / "configs" / "gated.yaml").write_text(
        f"extends: local\ntracking:\n  tracking_uri: {mlflow_server.uri}\n"
    )
    # the form lists the working folder's presets as the DAG is parsed
    stack.reparse_dag(lambda dag: "gated" in dag["params"]["config"]["schema"]["enum"])
    conf = {
        "config": "gated",
        "train_steps": 4,
        "overrides": [  # the preset's data: the session's stack shares runs/data/synthetic
            "train.checkpoint_every=2",
            "train.batch_size=4",
            "model.identity_weights=null",
            f"evaluate.identity_weights={EVALUATION_ENCODER}",
            "evaluate.gate.min_psnr=99",  # no model of 4 steps reaches it: the gate blocks
        ],
    }
    assert stack.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    status, body = stack.post(RUNS, {"logical_date": None, "conf": conf})
    assert status in (200, 201), body
    run_path = f"{RUNS}/{body['dag_run_id']}"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (run := stack.get(run_path)[1])["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, f"DAG run still {run['state']}"
        time.sleep(5)
    tis = stack.get(f"{run_path}/taskInstances")[1]["task_instances"]
    states = {ti["task_id"]: ti["state"] for ti in tis}
    assert (run["state"], states) == (
        "success",
        {"validate": "success", "compare_inputs": "success", "preflight": "success",
         "train": "success", "evaluate": "success", "register": "skipped", "review": "skipped"},
    ), stack.all_logs()[-6000:]  # fmt: skip

    # the note says what happened, written by the scheduler when the run ended
    deadline = time.monotonic() + 60  # the note is committed with the run's end state
    while not (note := stack.get(run_path)[1].get("note")):
        assert time.monotonic() < deadline, "the DAG run has no note"
        time.sleep(2)
    assert note.startswith("A decision, not a fault: not registered (gate blocked step 4: ")
    assert "psnr " in note and "(evaluate.gate.min_psnr)" in note
    # and a person sees it on the DAG run's page
    airflow_stack_page.open(f"/dags/{DAG_ID}/runs/{body['dag_run_id']}")
    airflow_stack_page.text_with("A decision, not a fault", what="the run's note on its page")
    airflow_stack_page.screenshot("gate-blocked-run")

    xcom = f"{run_path}/taskInstances/evaluate/xcomEntries"

    def value(key: str):
        """The XCom value as the task pushed it (stored as JSON text or as JSON itself)."""
        found = stack.get(f"{xcom}/{key}")[1]["value"]
        try:
            return json.loads(found) if isinstance(found, str) else found
        except ValueError:  # a plain string stored as itself
            return found

    assert value("evaluation_verdict") == "blocked"
    gate = value("evaluation_gate")
    assert gate["passed"] is False and any("psnr" in line for line in gate["failures"])

    links = stack.get(f"{run_path}/taskInstances/evaluate/links")[1]["extra_links"]
    run_id = value("mlflow_run_id")
    experiment = MlflowClient(mlflow_server.uri).get_run(run_id).info.experiment_id
    assert links["MLflow run"] == (
        f"{mlflow_server.uri}/#/experiments/{experiment}/runs/{run_id}"
        "?workflowType=machine_learning"
    )
    register_links = stack.get(f"{run_path}/taskInstances/register/links")[1]["extra_links"]
    assert register_links["MLflow model version"] is None  # nothing was registered

    tags = MlflowClient(mlflow_server.uri).get_run(run_id).data.tags
    assert (tags["ffjobs.evaluate"], tags["ffjobs.register"]) == ("blocked", "skipped")
