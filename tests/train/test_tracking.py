"""MLflow runs with one owner, against a real MLflow store: the owner starts and ends a run,
attached loggers only log into it (through their spool); failures never stop the work."""

from __future__ import annotations

import pytest

from ffjobs.config.tracking import TrackingConfig
from ffjobs.tracking.mlflow_logger import (
    RunLogger,
    TrackingWarning,
    end_run,
    environment_tags,
    flatten,
    reopen_run,
    start_run,
)
from ffjobs.tracking.spool import logged_steps


def test_flatten_nested_config():
    assert flatten({"train": {"lr": 1, "faults": {"kill_rank": None}}, "name": "x"}) == {
        "train.lr": 1,
        "train.faults.kill_rank": None,
        "name": "x",
    }


def test_owner_starts_and_ends_attached_loggers_only_log(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    config = TrackingConfig(
        tracking_uri=f"sqlite:///{tmp_path / 'db' / 'mlflow.db'}",
        artifact_location=str(tmp_path / "artifacts"),
        experiment="t",
    )
    spool = tmp_path / "run" / "tracking"
    run_id = start_run(config, "key-1", {"ffjobs.run_key": "key-1"})
    logger = RunLogger(config, run_id, spool)
    logger.log_params({"train": {"lr": 0.001}})
    logger.log_metrics({"loss_identity": 0.5, "images_per_s": 10.0}, step=2)
    assert logger.flush(30)
    client = mlflow.MlflowClient(config.tracking_uri)
    assert client.get_run(run_id).info.status == "RUNNING"  # an attached logger never ends it
    second = RunLogger(config, run_id, spool)
    second.log_metrics({"loss_identity": 0.25}, step=4)
    second.log_metrics({"loss_identity": 0.75}, step=4)  # a step is recorded once
    second.close(30)
    logger.close(30)
    end_run(config, run_id, "FINISHED")

    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "key-1"
    assert run.data.params["train.lr"] == "0.001"
    assert run.data.tags["ffjobs.run_key"] == "key-1"
    history = client.get_metric_history(run_id, "loss_identity")
    assert [(m.step, m.value) for m in history] == [(2, 0.5), (4, 0.25)]
    assert len(client.search_runs([run.info.experiment_id])) == 1

    assert reopen_run(config, run_id)  # the owner resuming the run
    assert client.get_run(run_id).info.status == "RUNNING"


def test_no_spool_and_disabled_tracking_do_nothing_and_no_run_yet_only_spools(tmp_path):
    pending = RunLogger(TrackingConfig(), None, tmp_path)  # the server was down at the start
    pending.log_metrics({"loss": 1.0}, step=1)
    pending.close()
    assert logged_steps(tmp_path) == {"loss": 1}  # kept for the owner to deliver
    assert RunLogger(TrackingConfig(), "abc", None).active is False
    assert RunLogger(TrackingConfig(enabled=False), "abc", tmp_path).active is False
    disabled = TrackingConfig(enabled=False, tracking_uri=f"sqlite:///{tmp_path / 'x.db'}")
    assert start_run(disabled, "k") is None
    assert not (tmp_path / "x.db").exists()


def test_unreachable_server_at_start_warns_and_the_work_goes_on(monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    # a closed loopback port: the tracking server is down
    config = TrackingConfig(tracking_uri="http://127.0.0.1:9")
    with pytest.warns(TrackingWarning, match="127.0.0.1:9"):
        assert start_run(config, "run", {"a": "b"}) is None


def test_airflow_tags_come_from_the_task_environment():
    environ = {"AIRFLOW_CTX_DAG_ID": "ffjobs_pipeline", "AIRFLOW_CTX_DAG_RUN_ID": "manual__1"}
    assert environment_tags(environ) == {
        "airflow.dag_id": "ffjobs_pipeline",
        "airflow.run_id": "manual__1",
    }
    assert environment_tags({}) == {}
