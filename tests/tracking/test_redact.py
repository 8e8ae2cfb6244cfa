"""Secrets never reach MLflow (read back from a real server): params and tags under credential
keys, AWS credentials inside any string, and the uploaded files; the run directory's own
config.json keeps what the user wrote."""

from __future__ import annotations

import json

import pytest

from ffjobs.config.tracking import TrackingConfig
from ffjobs.tracking.mlflow_logger import RunLogger, start_run
from ffjobs.tracking.redact import REDACTED, is_secret_key, redact_document

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize(
    "key",
    ["s3.secret_access_key", "db.Password", "registry.API_KEY", "x.github_token", "credentials"],
)
def test_credential_keys_are_recognised_anywhere_in_the_dotted_key(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["train.lr", "ffjobs.run_key", "data.source", "slurm.job_ids"])
def test_ordinary_keys_are_not_redacted(key):
    assert not is_secret_key(key)


def test_documents_lose_secret_values_and_environment_credentials(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    doc = {"s3": {"password": "hunter22", "url": f"http://x/?k={SECRET}"}, "steps": 3}
    assert redact_document(doc) == {
        "s3": {"password": REDACTED, "url": "http://x/?k=***"},
        "steps": 3,
    }


def test_params_tags_and_artifacts_on_the_server_hold_no_secret(
    tmp_path, monkeypatch, mlflow_server
):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    tracking = TrackingConfig(tracking_uri=mlflow_server.uri, experiment="redaction")
    run_id = start_run(tracking, "secrets", {"ffjobs.note": f"created with {KEY_ID}"})
    config = {"data": {"source": f"s3://bucket/faces?key={KEY_ID}"}, "s3": {"api_token": "t0ken!"}}
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    report = tmp_path / "summary.md"
    report.write_text(f"# report\npassword: swordfish\nenv had {SECRET}\n")

    logger = RunLogger(tracking, run_id, tmp_path / "run" / "tracking")
    logger.log_params(config)
    logger.set_tags({"deploy.auth_token": "abc123", "ffjobs.where": f"s3 with {SECRET}"})
    logger.log_artifacts([str(config_file), str(report)], "validate")
    assert logger.flush(60)
    logger.close()

    client = mlflow.MlflowClient(mlflow_server.uri)
    run = client.get_run(run_id)
    assert run.data.params["s3.api_token"] == REDACTED
    assert run.data.params["data.source"] == "s3://bucket/faces?key=***"
    assert run.data.tags["deploy.auth_token"] == REDACTED
    assert run.data.tags["ffjobs.where"] == "s3 with ***"
    assert run.data.tags["ffjobs.note"] == "created with ***"
    out = tmp_path / "download"
    out.mkdir()
    local = client.download_artifacts(run_id, "validate", str(out))
    uploaded_config = (out / "validate" / "config.json").read_text()
    uploaded_report = (out / "validate" / "summary.md").read_text()
    for text in (uploaded_config, uploaded_report):
        for secret in (SECRET, KEY_ID, "t0ken!", "swordfish"):
            assert secret not in text, (local, text)
    assert json.loads(uploaded_config)["s3"]["api_token"] == REDACTED
    assert "password: ***" in uploaded_report
    assert json.loads(config_file.read_text()) == config  # the run's own copy is left as it was
