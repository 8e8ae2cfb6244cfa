"""The register stage against a real MLflow server: the run's model logged into its own MLflow
run, registered with the model card, the review tags and the alias ``challenger``."""

from __future__ import annotations

import json

import pytest

from ffjobs.errors import UserError
from ffjobs.models.swap import FaceSwap
from ffjobs.registry.inputs import code_version, config_hash
from ffjobs.registry.swap import load_face_swap
from ffjobs.runs.stages import run_stage
from ffjobs.tracking.mlflow_logger import mlflow_client

from .conftest import TRAIN_STEPS, evaluate_outcome


@pytest.mark.slow  # the first user of the trained session fixture pays for its training
def test_registered_version_is_the_challenger_with_card_and_tags(trained, monkeypatch):
    config, run = trained.config, trained.run
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "ffjobs_pipeline")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026-12-01T10:00:00")
    outcome = run_stage(config, run, "register")
    assert outcome.status == "passed", outcome.summary
    name, version = outcome.facts["name"], outcome.facts["version"]
    assert name == "face-swap-under-review"
    assert outcome.facts["model_uri"] == f"models:/{name}/{version}"
    assert outcome.facts["link"].endswith(f"/#/models/{name}/versions/{version}")

    client = mlflow_client(config.tracking)
    registered = client.get_model_version(name, version)
    assert client.get_model_version_by_alias(name, "challenger").version == version
    assert registered.run_id == run.mlflow_run_id
    tags = registered.tags
    assert tags["validation_status"] == "pending_review"
    assert tags["dataset_fingerprint"] == run.record["dataset_fingerprint"]
    # what a scheduled run compares with to skip training on unchanged inputs
    assert tags["config_hash"] == config_hash(config)
    assert tags["code_version"] == code_version()
    assert tags["run_key"] == run.key
    assert tags["airflow_run_id"] == "manual__2026-12-01T10:00:00"
    assert tags["checkpoint_step"] == str(TRAIN_STEPS)
    assert len(tags["git_commit"].removesuffix("-dirty")) == 40 or tags["git_commit"] == "unknown"
    assert tags["eval.identity_top1"] == "0.5"

    card = registered.description
    assert card.startswith(f"# Face-swap model of run `{run.key}`")
    assert f"fingerprint `{run.record['dataset_fingerprint']}`" in card
    assert "- Validation: passed: 16 images, 4 identities" in card
    assert f"checkpoint step {TRAIN_STEPS} of train.steps={TRAIN_STEPS}" in card
    assert "1 node(s) x 1 rank(s), CPU" in card
    assert "- Preflight: skipped: preflight.enabled is false" in card
    assert f"- Training: passed: steps 0 -> {TRAIN_STEPS} on 1 ranks" in card
    assert "- Attempts: 1, goodput " in card and f"succeeded (steps 0 -> {TRAIN_STEPS})" in card
    assert "| identity_top1 | 0.5 | - | - |" in card
    assert "- Not measured: fid (set `evaluate.fid_weights`)" in card  # one line, no row
    assert "Gate: **passed**\n- identity_top1 0.50 >= 0.30 (threshold)" in card
    assert f"- MLflow run: <{config.tracking.tracking_uri}/#/experiments/" in card  # a link
    assert "- Airflow DAG run: ffjobs_pipeline / manual__2026-12-01T10:00:00" in card
    assert (run.dir / "register" / "model_card.md").read_text() == card

    # logged into the pipeline's run, which its owner still holds open
    assert client.get_run(run.mlflow_run_id).info.status == "RUNNING"
    assert client.get_run(run.mlflow_run_id).data.tags["ffjobs.register"] == "passed"
    loaded = load_face_swap(config.tracking, f"models:/{name}@challenger")
    assert isinstance(loaded, FaceSwap) and loaded.resolution == config.model.resolution
    assert registered.source == f"models:/{outcome.facts['model_id']}"
    logged = client.get_logged_model(outcome.facts["model_id"])  # what the version came from
    assert logged.source_run_id == run.mlflow_run_id
    assert logged.experiment_id == client.get_run(run.mlflow_run_id).info.experiment_id
    # the logged model's page lists the version (MLflow's own tag; without it: "Not registered")
    listed = json.loads(logged.tags["mlflow.modelVersions"])
    assert listed == [{"name": name, "version": int(version)}]  # once, as MLflow writes it

    # a retried task registers nothing twice
    again = run_stage(config, run, "register")
    assert again.status == "skipped" and again.facts["version"] == version
    assert len(client.search_model_versions(f"name='{name}'")) == int(version)


def test_register_refuses_a_run_without_a_passed_evaluation(tmp_path):
    from ffjobs.config import load_config
    from ffjobs.registry.stage import register_stage
    from ffjobs.runs.run import create_run

    config = load_config("local", ["tracking.enabled=false", f"runs_dir={tmp_path}"])
    run = create_run(config, echo=lambda _line: None)
    with pytest.raises(UserError, match=f"run {run.key} has no evaluation results.*--stages"):
        register_stage(config, run)
    blocked = evaluate_outcome(4)
    blocked.facts["gate"] = {"passed": False, "reasons": ["psnr 12.0 < champion 14.0 - 0.0"]}
    run.record_outcome(blocked)
    # a blocked gate is a decision: the stage skips, naming the failed check, and exits 0
    skipped = register_stage(config, run)
    assert skipped.status == "skipped" and skipped.exit_code == 0
    assert skipped.summary == (
        "not registered: the evaluation gate blocked this model (psnr 12.0 < champion 14.0 - 0.0)"
    )
