"""``decide`` is the one way a decision is applied: approve moves ``champion`` (the old one is
tagged with who replaced it and when), reject tags the version and leaves ``champion``; the CLI
and the pipeline's review task record the same tags for the same decision. Against an in-memory
registry at the client boundary (the real server: test_review.py)."""

from __future__ import annotations

import json

import pytest

from ffjobs.cli import main
from ffjobs.registry import commands
from ffjobs.registry.review import (
    APPROVE,
    REJECT,
    Review,
    decide,
    decision_summary,
    earlier_decision,
    review_history,
)

from .fake_registry import FakeRegistry

NAME = "face-swap"


@pytest.fixture
def registry() -> FakeRegistry:
    return FakeRegistry()


def test_approve_moves_the_champion_and_tags_the_one_it_replaces(registry):
    registry.register(NAME)
    decide(registry, NAME, "1", APPROVE, Review("ana", "first", "2026-01-01T00:00:00+00:00"))
    registry.register(NAME)
    review = Review("bo", "sharper", "2026-01-02T00:00:00+00:00")

    result = decide(registry, NAME, "2", APPROVE, review)

    assert result == {
        "name": NAME, "version": "2", "status": "approved", "changed": True, "replaced": "1"}  # fmt: skip
    assert registry.aliases[NAME] == {"champion": "2"}
    old, new = registry.versions[NAME]["1"], registry.versions[NAME]["2"]
    assert (old["replaced_by"], old["replaced_at"]) == ("2", "2026-01-02T00:00:00+00:00")
    assert old["validation_status"] == "approved"  # it was approved; it is only replaced
    assert (new["reviewed_by"], new["reviewed_at"], new["review_reason"]) == (
        "bo", "2026-01-02T00:00:00+00:00", "sharper")  # fmt: skip
    assert review_history(new) == [
        {"decision": "approved", "by": "bo", "at": "2026-01-02T00:00:00+00:00", "reason": "sharper"}
    ]
    assert decision_summary(result) == f"{NAME} version 2 is the champion (replaces version 1)"


def test_reject_tags_the_version_and_leaves_the_champion(registry):
    registry.register(NAME)
    decide(registry, NAME, "1", APPROVE, Review("ana", "first"))
    registry.register(NAME)

    result = decide(registry, NAME, "2", REJECT, Review("bo", "blurry eyes"))

    assert (result["status"], result["changed"], result["replaced"]) == ("rejected", True, None)
    assert registry.aliases[NAME] == {"champion": "1"}  # challenger dropped, champion kept
    tags = registry.versions[NAME]["2"]
    assert (tags["validation_status"], tags["reviewed_by"], tags["review_reason"]) == (
        "rejected", "bo", "blurry eyes")  # fmt: skip
    assert "replaced_by" not in registry.versions[NAME]["1"]
    assert decision_summary(result) == f"{NAME} version 2 is rejected; the champion is unchanged"


def test_an_unknown_decision_is_refused(registry):
    registry.register(NAME)
    with pytest.raises(ValueError, match="'promote': one of 'approve', 'reject'"):
        decide(registry, NAME, "1", "promote", Review("ana", "why not"))
    assert registry.versions[NAME]["1"] == {"validation_status": "pending_review"}


def test_earlier_decision_is_none_while_pending_and_the_decision_after(registry):
    registry.register(NAME)
    assert earlier_decision(registry, NAME, "1") is None
    decide(registry, NAME, "1", REJECT, Review("ana", "too soft", "2026-01-01T00:00:00+00:00"))
    assert earlier_decision(registry, NAME, "1") == {
        "status": "rejected",
        "reviewed_by": "ana",
        "reviewed_at": "2026-01-01T00:00:00+00:00",
        "review_reason": "too soft",
    }


@pytest.mark.parametrize("decision", [APPROVE, REJECT])
def test_the_cli_and_the_review_task_record_the_same_tags(decision, monkeypatch, capsys):
    from ffjobs.airflow.review import conclude_review

    by_cli, by_task = FakeRegistry(), FakeRegistry()
    for registry in (by_cli, by_task):
        registry.register(NAME)
    monkeypatch.setattr(commands, "_client", lambda args: by_cli)
    argv = ["registry", decision, NAME, "1", "--reason", "checked it", "--reviewer", "ana"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    at = by_cli.versions[NAME]["1"]["reviewed_at"]
    answer = {
        "chosen_options": ["Approve" if decision == APPROVE else "Reject"],
        "params_input": {"reason": "checked it"},
        "responded_at": at,
        "responded_by_user": {"id": "ana", "name": "ana"},
    }
    result = conclude_review(by_task, NAME, "1", answer, timeout_h=1)

    assert by_task.versions == by_cli.versions
    assert by_task.aliases == by_cli.aliases
    assert {k: result[k] for k in printed} == printed
