"""The review inside the DAG against a real Airflow (all four components) and the real MLflow
server: a DAG run triggered through REST waits in its review task (``awaiting_input``) with the
evaluation, the sample grid and the links in the question; an approval through ``PATCH
.../hitlDetails`` moves the registry's ``champion`` alias and records the Airflow user and the
reason on the version; a second DAG run, rejected, leaves the alias and tags its version.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from airflow_stack import (
    DAG_RUN_TIMEOUT_S,
    EVALUATION_ENCODER,
    RUNS,
    START_TIMEOUT_S,
    USERNAME,
    AirflowStack,
    task_states,
    trigger_dag_run,
    wait_for,
    wait_for_end,
    write_evaluation_encoder,
)
from integration.test_airflow_dag import TINY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REVIEW = "review"


@pytest.fixture(scope="module")
def tracking_uri(request: pytest.FixtureRequest) -> str:
    """The local stack's MLflow server: the exported one when its env.sh was sourced, else the
    one ``local_stack`` starts."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri.startswith("http://"):
        uri = request.getfixturevalue("local_stack")["MLFLOW_TRACKING_URI"]
    return uri


def review_conf(stack: AirflowStack, tracking_uri: str) -> tuple[dict, str]:
    """A DAG run's conf for a tiny run that asks for a review, and the registered model of this
    test's own on the shared server that it registers into. The deployment's config (the
    tracking server is set there: a conf may not) is listed in the form after a re-parse."""
    model = f"review-it-{uuid.uuid4().hex[:10]}"
    name = f"review-{model}"
    configs = stack.workdir / "configs"
    configs.mkdir(exist_ok=True)
    (configs / f"{name}.yaml").write_text(
        "extends: local\n"
        f"tracking:\n  tracking_uri: {tracking_uri}\n"
        f"registry:\n  model_name: {model}\n"
        # a few steps learn nothing; the second run is not blocked by the first's figures
        "evaluate:\n  gate:\n    min_ssim: 0\n    min_identity_top1: 0\n    compare: []\n"
    )
    stack.reparse_dag(lambda dag: name in dag["params"]["config"]["schema"]["enum"])
    if not (stack.workdir / EVALUATION_ENCODER).exists():
        write_evaluation_encoder(stack.workdir)
    overrides = [
        *TINY,
        "registry.review_timeout_h=1",  # TINY's 0 skips the review
        f"evaluate.identity_weights={EVALUATION_ENCODER}",
    ]
    return {"config": name, "train_steps": 2, "overrides": overrides}, model


def hitl_path(run_id: str) -> str:
    return f"{RUNS}/{run_id}/taskInstances/{REVIEW}/-1/hitlDetails"


def run_until_review(stack: AirflowStack, conf: dict) -> tuple[str, dict]:
    """Trigger a DAG run; wait until its review task awaits input; its run id and question."""
    run_id = trigger_dag_run(stack, conf)
    states = wait_for(
        stack,
        run_id,
        lambda s: (
            s.get(REVIEW) in ("awaiting_input", "success", "failed", "skipped", "upstream_failed")
        ),
        "the review task to ask",
    )
    assert states[REVIEW] == "awaiting_input", states
    parked_process_seen(stack, run_id)
    status, question = stack.get(hitl_path(run_id))
    assert status == 200, question
    return run_id, question


def parked_process_seen(stack: AirflowStack, run_id: str) -> None:
    """Wait until the scheduler has taken in the end of the process that parked the review task.

    Airflow 3.3.2 fails a resumed task whose parking process's end the scheduler reads only after
    the resume was queued ("finished with state success, but the task instance's state attribute
    is running"): its guard covers a resumed task still *scheduled* only. A person answers
    minutes later; this test answers at once, so it waits for that event first."""
    key = f"task_id='{REVIEW}', run_id='{run_id}'"
    deadline = time.monotonic() + 120  # a scheduler loop or two; a busy machine's few seconds
    while key not in _executor_events(stack):
        assert time.monotonic() < deadline, f"the scheduler never read the review's park: {key}"
        time.sleep(1)


def _executor_events(stack: AirflowStack) -> str:
    log = stack.log_path("scheduler").read_text(errors="replace")
    return "\n".join(
        x for x in log.splitlines() if "Received executor event with state success" in x
    )


def answer(stack: AirflowStack, run_id: str, option: str, reason: str) -> None:
    status, body = stack.patch(
        hitl_path(run_id), {"chosen_options": [option], "params_input": {"reason": reason}}
    )
    assert status == 200, body
    assert wait_for_end(stack, run_id) == "success", task_states(stack, run_id)
    assert task_states(stack, run_id)[REVIEW] == "success"


# the stack's start, two tiny DAG runs (each bounded by DAG_RUN_TIMEOUT_S), their answers
@pytest.mark.timeout(START_TIMEOUT_S + 2 * DAG_RUN_TIMEOUT_S)
def test_approve_moves_the_champion_and_reject_tags_the_version(airflow_stack, tracking_uri):
    from mlflow.tracking import MlflowClient

    stack = airflow_stack
    conf, model = review_conf(stack, tracking_uri)
    client = MlflowClient(tracking_uri=tracking_uri)

    run_id, question = run_until_review(stack, conf)
    assert question["options"] == ["Approve", "Reject"]
    assert question["subject"] == f"Approve {model} version 1 as the champion?"
    body = question["body"]
    # the evaluation table, each value with its interval
    assert "| metric | this model [95% interval] | champion | change |" in body
    assert "Champion compared: none (no champion yet)" in body
    assert f"{tracking_uri}/get-artifact?path=evaluate/samples.png&run_uuid=" in body
    assert f"{tracking_uri}/#/models/{model}/versions/1" in body
    assert set(question["params"]) == {"reason"}
    assert client.get_registered_model(model).aliases == {"challenger": "1"}

    answer(stack, run_id, "Approve", "sharp swaps, identity kept")
    assert client.get_registered_model(model).aliases == {"champion": "1"}
    tags = client.get_model_version(model, "1").tags
    assert tags["validation_status"] == "approved"
    assert tags["reviewed_by"] == USERNAME  # the Airflow user who answered
    assert tags["review_reason"] == "sharp swaps, identity kept"
    assert '"decision": "approved", "by": "admin"' in tags["review.1"]

    # a second DAG run, rejected: the champion stays, the version is tagged with who and why
    run_id, question = run_until_review(stack, conf)
    assert question["subject"] == f"Approve {model} version 2 as the champion?"
    assert "Champion compared: 1" in question["body"]  # the champion's figures beside
    answer(stack, run_id, "Reject", "blurry eyes")
    assert client.get_registered_model(model).aliases == {"champion": "1"}
    tags = client.get_model_version(model, "2").tags
    assert tags["validation_status"] == "rejected"
    assert (tags["reviewed_by"], tags["review_reason"]) == (USERNAME, "blurry eyes")
    assert client.get_model_version(model, "1").tags["validation_status"] == "approved"
