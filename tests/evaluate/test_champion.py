"""The gate against the registry's champion on a real MLflow server: the champion is loaded
from the registry and evaluated now, on the same set with the same encoder."""

from __future__ import annotations

import pytest

from ffjobs.errors import ExitCode
from ffjobs.evaluate.stage import evaluate_stage
from ffjobs.registry.publish import log_face_swap, register_version
from ffjobs.runs.run import create_run
from ffjobs.tracking.mlflow_logger import mlflow_client
from ffjobs.train.swap import face_swap_from_checkpoint

from .conftest import TRAINED_S
from .test_evaluate import untrained_model

NAME = "ffjobs-evaluate-test"
# the shared trained model (about a minute on 2 cores), then the test's own work
pytestmark = [pytest.mark.slow, pytest.mark.timeout(TRAINED_S + 600)]


def register_champion(config, model) -> str:
    """Log ``model`` as the register stage does (weights and recorded config), register it
    and make it the champion; returns its version."""
    client = mlflow_client(config.tracking)
    run_id = client.create_run("0").info.run_id  # the server's Default experiment
    info = log_face_swap(client, config.tracking, run_id, model, config.model)
    version = register_version(
        client, config.tracking, NAME, info, run_id, description="champion under test", tags={}
    )
    client.set_registered_model_alias(NAME, "champion", version.version)
    return str(version.version)


def test_gate_passes_a_model_better_than_the_champion_and_blocks_a_worse_one(
    trained, mlflow_server, tmp_path
):
    config = trained.config(
        "tracking.enabled=true",
        f"tracking.tracking_uri={mlflow_server.uri}",
        f"registry.model_name={NAME}",
        f"runs_dir={tmp_path / 'runs'}",
        f"train.checkpoint_dir={trained.root / 'runs/checkpoints'}",
    )
    run = create_run(config, key=trained.run_key)  # the shared checkpoints, a run of our own

    alone = evaluate_stage(config, run)  # no such registered model yet: thresholds only
    assert alone.status == "passed" and alone.facts["champion"] is None
    assert f"no champion of {NAME}: thresholds only" in alone.summary

    untrained = register_champion(config, untrained_model(config))
    better = evaluate_stage(config, run)
    assert better.status == "passed", better.summary
    champion = better.facts["champion"]
    assert champion["version"] == untrained and champion["model_uri"] == f"models:/{NAME}/1"
    assert champion["deltas"]["identity_cosine"] > 0 and champion["deltas"]["ssim"] > 0
    assert champion["deltas"]["identity_top1"] > 0
    for metric in ("identity_top1", "identity_cosine", "psnr", "ssim"):  # all compared
        assert any(
            r.startswith(f"{metric} ") and ">= champion" in r
            for r in better.facts["gate"]["reasons"]
        )

    trained_model, _ = face_swap_from_checkpoint(config, run.checkpoint_dir)
    register_champion(config, trained_model)
    worse = evaluate_stage(config, run, model_uri=f"models:/{NAME}/{untrained}")
    assert worse.status == "blocked" and worse.exit_code == ExitCode.FAILED  # a decision
    assert worse.facts["champion"]["version"] == "2"
    assert worse.summary.startswith(f"gate blocked models:/{NAME}/1: ")
    assert "< champion" in worse.summary and not worse.facts["gate"]["passed"]
    # the champion evaluated now gives what the trained model gave as the candidate: the same
    # weights on the same set, so the same numbers
    assert worse.facts["champion"]["metrics"] == better.facts["metrics"]
