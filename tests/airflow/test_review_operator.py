"""The review task: ``execute`` writes the question from the run (the evaluation with the
champion's figures, the sample grid, the links) and waits with the config's timeout, or skips
or reports an earlier decision; ``execute_complete`` applies the answer with ``decide`` as the
Airflow user who gave it, never a second decision, and says what a timeout left undecided.
Against an in-memory registry at the MLflow client boundary; the real Airflow and MLflow server
run the same paths in tests/integration/test_airflow_review.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow.providers.standard.operators import hitl
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskAwaitingInput
from registry.conftest import evaluate_outcome
from registry.fake_registry import FakeRegistry

from ffjobs.airflow.review import (
    ReviewOperator,
    conclude_review,
    review_body,
    sample_grid_url,
)
from ffjobs.config import load_config
from ffjobs.config.tracking import TrackingConfig
from ffjobs.errors import UserError
from ffjobs.registry.review import REJECT, Review, decide, review_history
from ffjobs.runs.run import create_run

NAME = "face-swap"
ANSWERED_AT = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
CHAMPION = {
    "version": "1",
    "model_uri": f"models:/{NAME}/1",
    "metrics": {"identity_top1": 0.25, "psnr": 13.0},
    "deltas": {"identity_top1": 0.25, "psnr": 1.2},
}


def answer(option: str, reason: str = "checked the grid", user: str = "ana") -> dict[str, Any]:
    """What Airflow hands ``execute_complete`` for a reviewer's answer."""
    return {
        "chosen_options": [option],
        "params_input": {"reason": reason},
        "responded_at": ANSWERED_AT,
        "responded_by_user": {"id": user, "name": user},
        "timedout": False,
    }


TIMEOUT = {"error": "The Human-in-the-loop response timeout has passed", "error_type": "timeout"}


@pytest.fixture
def registry(monkeypatch) -> FakeRegistry:
    fake = FakeRegistry()
    monkeypatch.setattr("ffjobs.tracking.mlflow_logger.mlflow_client", lambda tracking: fake)
    return fake


@pytest.fixture
def run(tmp_path):
    def make(*overrides: str):
        config = load_config(
            "local", [f"runs_dir={tmp_path / 'runs'}", "tracking.enabled=false", *overrides]
        )
        made = create_run(config, echo=lambda line: None)
        made.record_outcome(evaluate_outcome(4, champion=CHAMPION))
        made.save()
        return made

    return make


@pytest.fixture
def asked(monkeypatch) -> list[dict[str, Any]]:
    """The questions the task wrote (Airflow's ``upsert_hitl_detail``)."""
    questions: list[dict[str, Any]] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: questions.append(kw))
    return questions


def operator(run, version: str) -> ReviewOperator:
    state = {"run_dir": str(run.dir), "registered_name": NAME, "registered_version": version}
    return ReviewOperator(task_id="review", state=state)


def context() -> dict[str, Any]:
    class TaskInstance:
        id = "ti-1"

    return {"task_instance": TaskInstance(), "ti": TaskInstance()}


def test_the_task_asks_with_the_evaluation_samples_and_links_and_the_configs_timeout(
    registry, run, asked
):
    registry.register(NAME)
    registry.register(NAME)
    task = operator(run("registry.review_timeout_h=48"), "2")
    assert task.retries == 0

    with pytest.raises(TaskAwaitingInput) as waiting:
        task.execute(context())

    assert waiting.value.timeout == timedelta(hours=48)
    (question,) = asked
    assert question["options"] == ["Approve", "Reject"]
    assert question["subject"] == f"Approve {NAME} version 2 as the champion?"
    body = question["body"]
    assert "| identity_top1 | 0.5 | 0.25 | +0.25 (better) |" in body  # the champion beside
    assert "Champion compared: 1" in body and "Gate: **passed**" in body
    assert "evaluate/samples.png" in body
    assert f"model {NAME} version 2" in body  # the version's place in the store
    assert "version 1 is tagged `replaced_by`" in body
    assert set(question["params"]) == {"reason"}


def test_no_question_with_a_zero_timeout(registry, run, asked):
    registry.register(NAME)
    with pytest.raises(AirflowSkipException, match="registry.review_timeout_h is 0"):
        operator(run("registry.review_timeout_h=0"), "1").execute(context())
    assert asked == []


def test_a_version_decided_before_the_question_is_not_asked_about(registry, run, asked):
    registry.register(NAME)
    decide(registry, NAME, "1", REJECT, Review("bo", "worse faces"))

    result = operator(run(), "1").execute(context())

    assert asked == []
    assert (result["status"], result["reviewed_by"], result["decided_here"]) == (
        "rejected", "bo", False)  # fmt: skip


def test_an_approval_in_airflow_moves_the_champion_as_the_user_who_gave_it(registry, run):
    registry.register(NAME)

    result = operator(run(), "1").execute_complete(context(), answer("Approve", "sharp"))

    assert registry.aliases[NAME] == {"champion": "1"}
    tags = registry.versions[NAME]["1"]
    assert (tags["reviewed_by"], tags["reviewed_at"], tags["review_reason"]) == (
        "ana", "2026-03-04T05:06:07+00:00", "sharp")  # fmt: skip
    assert result["decided_here"] is True and result["status"] == "approved"


def test_a_rejection_in_airflow_leaves_the_champion(registry, run):
    registry.register(NAME)
    decide(registry, NAME, "1", "approve", Review("bo", "first"))
    registry.register(NAME)

    operator(run(), "2").execute_complete(context(), answer("Reject", "blurry", user="cy"))

    assert registry.aliases[NAME] == {"champion": "1"}
    tags = registry.versions[NAME]["2"]
    assert (tags["validation_status"], tags["reviewed_by"]) == ("rejected", "cy")


def test_a_decision_made_with_the_cli_while_waiting_is_not_made_twice(registry):
    registry.register(NAME)
    decide(registry, NAME, "1", REJECT, Review("bo", "worse faces", "2026-03-01T00:00:00+00:00"))

    result = conclude_review(registry, NAME, "1", answer("Approve"), timeout_h=72)

    assert registry.aliases[NAME] == {}  # not approved after all
    assert len(review_history(registry.versions[NAME]["1"])) == 1
    assert result["decided_here"] is False
    assert result["summary"] == (
        f"{NAME} version 1 was rejected by bo at 2026-03-01T00:00:00+00:00 (worse faces) "
        "before this review; ana's answer in Airflow (approve) was not applied"
    )


def test_a_timeout_decides_nothing_and_says_so(registry, run):
    registry.register(NAME)
    with pytest.raises(AirflowFailException) as failed:
        operator(run("registry.review_timeout_h=2"), "1").execute_complete(context(), TIMEOUT)
    assert str(failed.value) == (
        f"review: no answer within 2 h (registry.review_timeout_h): nothing is decided, {NAME} "
        f"version 1 stays the challenger, pending review; decide with: ffjobs registry "
        f'approve|reject {NAME} 1 --reason "..."'
    )
    assert registry.versions[NAME]["1"] == {"validation_status": "pending_review"}
    assert registry.aliases[NAME] == {"challenger": "1"}


def test_a_timeout_after_a_cli_decision_reports_it(registry):
    registry.register(NAME)
    decide(registry, NAME, "1", "approve", Review("bo", "good"))
    result = conclude_review(registry, NAME, "1", TIMEOUT, timeout_h=1)
    assert result["status"] == "approved" and "no answer in Airflow" in result["summary"]


def test_an_answer_without_a_reason_records_nothing(registry, run):
    registry.register(NAME)
    with pytest.raises(AirflowFailException, match="ana answered Approve without a reason"):
        operator(run(), "1").execute_complete(context(), answer("Approve", reason=" "))
    assert registry.versions[NAME]["1"] == {"validation_status": "pending_review"}
    with pytest.raises(UserError, match="without a reason"):
        conclude_review(registry, NAME, "1", answer("Reject", reason=""), timeout_h=1)


def test_the_sample_grid_is_an_image_on_a_tracking_server(run):
    server = TrackingConfig(tracking_uri="http://mlflow.example:5000/")
    assert sample_grid_url(server, "abc") == (
        "http://mlflow.example:5000/get-artifact?path=evaluate/samples.png&run_uuid=abc"
    )
    assert sample_grid_url(TrackingConfig(tracking_uri="sqlite:///m.db"), "abc") is None
    body = review_body(run(), NAME, "1")  # a sqlite store: the grid's path instead
    assert "Rows: source, target, this model's swap, the champion's swap" in body
