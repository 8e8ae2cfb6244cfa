"""Rank-0 MLflow logging against a real MLflow store; failures warn once and never stop training."""

from __future__ import annotations

import warnings

import pytest

from ffjobs.tracking.config import TrackingConfig
from ffjobs.tracking.mlflow_logger import RunLogger, TrackingWarning, flatten


def test_flatten_nested_config():
    assert flatten({"train": {"lr": 1, "faults": {"kill_rank": None}}, "name": "x"}) == {
        "train.lr": 1,
        "train.faults.kill_rank": None,
        "name": "x",
    }


def test_logs_params_and_metrics_and_resumes_the_same_run(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    config = TrackingConfig(
        tracking_uri=f"sqlite:///{tmp_path / 'db' / 'mlflow.db'}",
        artifact_location=str(tmp_path / "artifacts"),
        experiment="t",
    )
    logger = RunLogger(config, active=True)
    logger.start("run", {"train": {"lr": 0.001}})
    logger.log_metrics({"loss/identity": 0.5, "images_per_s": 10.0}, step=2)
    logger.finish()
    again = RunLogger(config, active=True)
    again.start("run", {}, run_id=logger.run_id)  # a restart continues the run it checkpointed
    again.log_metrics({"loss/identity": 0.25}, step=4)
    again.finish()

    client = mlflow.MlflowClient(config.tracking_uri)
    run = client.get_run(logger.run_id)
    assert run.data.params["train.lr"] == "0.001"
    history = client.get_metric_history(logger.run_id, "loss_identity")
    assert [(m.step, m.value) for m in history] == [(2, 0.5), (4, 0.25)]
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_inactive_ranks_and_disabled_tracking_do_nothing():
    assert RunLogger(TrackingConfig(), active=False).active is False
    assert RunLogger(TrackingConfig(enabled=False), active=True).active is False


def test_unreachable_server_warns_once_and_training_goes_on(monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    # a closed loopback port: the tracking server is down
    logger = RunLogger(TrackingConfig(tracking_uri="http://127.0.0.1:9"), active=True)
    with pytest.warns(TrackingWarning, match="127.0.0.1:9"):
        logger.start("run", {"a": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        logger.log_metrics({"x": 1.0}, step=1)
        logger.finish()
