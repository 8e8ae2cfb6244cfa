"""The evaluate and register operators keep their extra links' addresses: the MLflow run, and
the model version the register stage recorded; a store without pages (sqlite) gets none."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from ffjobs.airflow import tasks
from ffjobs.airflow.links import MlflowRunLink, ModelVersionLink
from ffjobs.airflow.worker_stages import RegisterOperator
from ffjobs.config import load_config
from ffjobs.runs.run import StageOutcome, create_run

VERSION_PAGE = "http://mlflow.example/#/models/m/versions/1"


class TaskInstance:
    def __init__(self):
        self.try_number, self.max_tries, self.xcom = 1, 0, {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def _state(tmp_path) -> dict[str, Any]:
    config = load_config("local", ["tracking.enabled=false", f"runs_dir={tmp_path}"])
    run = create_run(config, echo=lambda _line: None)
    return {"run_key": run.key, "run_dir": str(run.dir), "mlflow_run_id": None}


def _register_recording(outcome: StageOutcome):
    def register(state: dict[str, Any]) -> dict[str, Any]:
        run = tasks.attach(state)
        run.record_outcome(outcome)
        run.save()
        if outcome.status == "skipped":
            raise AirflowSkipException(outcome.summary)
        return {"registered_version": "1"}

    return register


def test_register_links_the_version_it_recorded(tmp_path, monkeypatch):
    state = _state(tmp_path)
    passed = StageOutcome("register", "passed", 0.0, "v1", facts={"link": VERSION_PAGE})
    monkeypatch.setattr(tasks, "register", _register_recording(passed))
    ti = TaskInstance()
    RegisterOperator(task_id="register", state=state).execute({"ti": ti})
    assert ti.xcom[ModelVersionLink().xcom_key] == VERSION_PAGE
    assert MlflowRunLink().xcom_key not in ti.xcom  # tracking off: no run page


def test_a_skipped_register_keeps_no_version_link(tmp_path, monkeypatch):
    state = _state(tmp_path)
    blocked = StageOutcome("register", "skipped", 0.0, "not registered: the gate blocked it")
    monkeypatch.setattr(tasks, "register", _register_recording(blocked))
    ti = TaskInstance()
    with pytest.raises(AirflowSkipException, match="not registered"):
        RegisterOperator(task_id="register", state=state).execute({"ti": ti})
    assert ti.xcom == {}


def test_a_plain_text_address_is_never_kept_as_a_link():
    ti = TaskInstance()
    ModelVersionLink().keep({"ti": ti}, "sqlite:///runs/mlflow.db (model m version 1)")
    assert ti.xcom == {}
