"""Approve, reject and list against a real MLflow server (and the sqlite store): aliases move
as the review decides and every decision is recorded on its version."""

from __future__ import annotations

import copy
import json
from datetime import datetime

import pytest

from ffjobs.cli import main
from ffjobs.registry.review import review_history
from ffjobs.runs.stages import run_stage
from ffjobs.tracking.mlflow_logger import mlflow_client

from .conftest import candidate_run


def _config(trained, name, tracking_uri=None):
    config = copy.deepcopy(trained.config)
    config.registry.model_name = name
    if tracking_uri:
        config.tracking.tracking_uri = tracking_uri
    return config


def _register(trained, config) -> str:
    outcome = run_stage(config, candidate_run(trained, config), "register")
    assert outcome.status == "passed", outcome.summary
    return outcome.facts["version"]


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _aliases(client, name) -> dict[str, str]:
    return {alias: str(v) for alias, v in client.get_registered_model(name).aliases.items()}


@pytest.mark.slow  # needs the trained session fixture
def test_approve_moves_champion_and_reject_leaves_it(trained, monkeypatch, capsys):
    name = "review-flow"
    config = _config(trained, name)
    client = mlflow_client(config.tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", config.tracking.tracking_uri)

    assert _register(trained, config) == "1"
    assert _aliases(client, name) == {"challenger": "1"}
    code, out, _ = _cli(
        capsys, "registry", "approve", name, "1", "--reason", "first model", "--reviewer", "ana"
    )
    assert code == 0 and f"{name} version 1 is the champion" in out
    assert _aliases(client, name) == {"champion": "1"}  # challenger was v1: removed
    tags = client.get_model_version(name, "1").tags
    assert tags["validation_status"] == "approved" and tags["reviewed_by"] == "ana"
    assert tags["review_reason"] == "first model"
    assert datetime.fromisoformat(tags["reviewed_at"]).utcoffset().total_seconds() == 0

    assert _register(trained, config) == "2"
    assert _aliases(client, name) == {"champion": "1", "challenger": "2"}
    code, out, _ = _cli(capsys, "registry", "approve", name, "2", "--reason", "better identity")
    assert code == 0 and "(replaces version 1)" in out
    assert _aliases(client, name) == {"champion": "2"}
    v1, v2 = (client.get_model_version(name, v).tags for v in ("1", "2"))
    assert v1["replaced_by"] == "2" and v1["replaced_at"] == v2["reviewed_at"]
    assert v2["validation_status"] == "approved" and v2["reviewed_by"]  # the OS user

    assert _register(trained, config) == "3"
    code, out, _ = _cli(capsys, "registry", "reject", name, "3", "--reason", "blurry eyes")
    assert code == 0 and "champion is unchanged" in out
    assert _aliases(client, name) == {"champion": "2"}
    v3 = client.get_model_version(name, "3").tags
    assert v3["validation_status"] == "rejected" and v3["review_reason"] == "blurry eyes"

    # a rejected version needs --force; the champion cannot be rejected; unknown names
    code, _, err = _cli(capsys, "registry", "approve", name, "3", "--reason", "on second look")
    assert code == 2 and err.count("\n") == 1 and "--force" in err and "blurry eyes" in err
    code, _, err = _cli(capsys, "registry", "reject", name, "2", "--reason", "x")
    assert code == 2 and "is the champion" in err
    assert _aliases(client, name) == {"champion": "2"}
    code, _, err = _cli(capsys, "registry", "approve", name, "9", "--reason", "x")
    assert code == 2 and f"model '{name}' has no version 9 (it has versions 1..3)" in err
    code, _, err = _cli(capsys, "registry", "list", "no-such-model")
    assert code == 2 and "model 'no-such-model' not found" in err and name in err
    with pytest.raises(SystemExit) as missing_reason:
        main(["registry", "reject", name, "3"])
    assert missing_reason.value.code == 2 and "--reason" in capsys.readouterr().err

    code, out, _ = _cli(capsys, "registry", "list", name, "--json")
    rows = json.loads(out)
    assert [(r["version"], r["aliases"], r["status"]) for r in rows] == [
        ("3", [], "rejected"),
        ("2", ["champion"], "approved"),
        ("1", [], "approved"),
    ]
    assert rows[2]["replaced_by"] == "2" and rows[0]["metrics"]["identity_top1"] == "0.5"
    assert all(r["run_key"] for r in rows)
    code, out, _ = _cli(capsys, "registry", "list", name)
    assert code == 0 and "champion" in out and "approved (replaced by 2)" in out

    code, out, _ = _cli(capsys, "registry", "approve", name, "3", "--reason", "fine", "--force")
    assert code == 0 and _aliases(client, name) == {"champion": "3"}
    history = review_history(client.get_model_version(name, "3").tags)
    assert [(r["decision"], r["reason"]) for r in history] == [
        ("rejected", "blurry eyes"),
        ("approved", "fine"),
    ]
    assert history[1]["forced_over"] == "rejected"


@pytest.mark.slow  # needs the trained session fixture
def test_only_the_challenger_is_approved_and_every_review_is_kept(trained, monkeypatch, capsys):
    name = "review-history"
    config = _config(trained, name)
    client = mlflow_client(config.tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", config.tracking.tracking_uri)
    assert [_register(trained, config) for _ in range(2)] == ["1", "2"]

    # version 1 is pending but no longer the challenger: approving it needs --force
    before = client.get_model_version(name, "1").tags
    code, _, err = _cli(capsys, "registry", "approve", name, "1", "--reason", "x")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{name} version 1 is not the challenger (the challenger is version 2" in err
    assert "--force" in err and client.get_model_version(name, "1").tags == before

    approve = ("registry", "approve", name, "2", "--reason")
    assert _cli(capsys, *approve, "sharper", "--reviewer", "ana")[0] == 0
    after_first = client.get_model_version(name, "2").tags
    code, out, _ = _cli(capsys, *approve, "agree", "--reviewer", "bo")
    assert code == 0 and f"{name} version 2 is the champion already (approved by ana" in out
    assert "nothing changed" in out
    assert client.get_model_version(name, "2").tags == after_first  # nothing written

    # version 1 made the champion over version 2 (a roll-back), then version 2 again
    code, _, err = _cli(capsys, "registry", "approve", name, "1", "--reason", "back", "--force")
    assert code == 0 and _aliases(client, name) == {"champion": "1"}
    code, _, err = _cli(capsys, *approve, "fixed after all", "--reviewer", "cy")
    assert code == 2 and "no version is the challenger" in err
    code, out, _ = _cli(capsys, *approve, "fixed after all", "--reviewer", "cy", "--force")
    assert code == 0 and "(replaces version 1)" in out
    history = review_history(client.get_model_version(name, "2").tags)
    assert [(r["decision"], r["by"], r["reason"]) for r in history] == [
        ("approved", "ana", "sharper"),
        ("approved", "cy", "fixed after all"),
    ]  # the first reviewer's record is kept beside the second's
    assert history[1]["forced_over"] == "approved"
    tags = client.get_model_version(name, "2").tags
    assert tags["reviewed_by"] == "cy" and tags["review.1"] != tags["review.2"]

    code, out, _ = _cli(capsys, "registry", "list", name, "--json")
    rows = {row["version"]: row for row in json.loads(out)}
    assert [r["by"] for r in rows["2"]["reviews"]] == ["ana", "cy"]
    assert [r["reason"] for r in rows["1"]["reviews"]] == ["back"]


@pytest.mark.slow  # needs the trained session fixture
def test_review_on_the_sqlite_store(trained, tmp_path, capsys, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # MLflow's own default points elsewhere: the config's store must win everywhere
    monkeypatch.setenv("MLFLOW_TRACKING_URI", trained.config.tracking.tracking_uri)
    config = _config(trained, "local-review", uri)
    assert _register(trained, config) == "1"
    code, out, _ = _cli(
        capsys, "registry", "approve", "local-review", "1", "--reason", "ok",
        "--set", f"tracking.tracking_uri={uri}",
    )  # fmt: skip
    assert code == 0
    assert _aliases(mlflow_client(config.tracking), "local-review") == {"champion": "1"}


def test_registry_and_swap_help(capsys):
    for argv in (["registry", "--help"], ["swap", "--help"], ["registry", "approve", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert "MLFLOW_TRACKING_URI" in text
    # the last one: what approve records and when it needs --force
    assert "--reason" in text and "--force" in text and "replaced_by" in text
    words = " ".join(text.split())  # as argparse wraps it
    assert "not the challenger" in words and "review.1" in words
