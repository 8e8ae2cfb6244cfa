"""A new run's MLflow run says what it is in MLflow's own fields: description, user, source,
git commit (a real sqlite store)."""

from __future__ import annotations

import getpass

from ffjobs.config import load_config
from ffjobs.runs.description import description_tags
from ffjobs.runs.run import create_run
from ffjobs.tracking.provenance import code_commit


def test_a_new_run_carries_its_description_user_source_and_commit(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    for name in ("AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = load_config("local", [f"runs_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}"])
    run = create_run(config, echo=lambda _line: None)
    tags = MlflowClient(uri).get_run(run.mlflow_run_id).data.tags

    note = tags["mlflow.note.content"]
    assert note.startswith(f"ffjobs run `{run.key}` of config `local`: face swap at ")
    assert "- Started from the command line (`ffjobs`)" in note
    assert tags["mlflow.user"] == getpass.getuser()
    assert (tags["mlflow.source.name"], tags["mlflow.source.type"]) == ("ffjobs run", "LOCAL")
    assert tags["mlflow.source.git.commit"] == code_commit() != "unknown"  # a git checkout here


def test_a_run_of_a_dag_names_it_and_the_person_who_triggered_it():
    config = load_config("local", [])
    airflow = {"dag_id": "ffjobs_pipeline", "run_id": "manual__2026-01-01"}
    tags = description_tags(config, "k", airflow, user="ana")
    assert (
        "- Started from Airflow DAG `ffjobs_pipeline`, run `manual__2026-01-01`"
        in tags["mlflow.note.content"]
    )
    assert tags["mlflow.user"] == "ana"
    assert (tags["mlflow.source.name"], tags["mlflow.source.type"]) == (
        "airflow:ffjobs_pipeline", "JOB")  # fmt: skip


def test_a_sqlite_store_keeps_artifacts_beside_its_database(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    config = load_config("local", [f"runs_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}"])
    run = create_run(config, echo=lambda _line: None)
    client = MlflowClient(uri)
    client.log_text(run.mlflow_run_id, "checked", "stage/report.txt")
    folder = tmp_path / "runs" / "mlartifacts"
    (found,) = folder.glob(f"{run.mlflow_run_id}/artifacts/stage/report.txt")
    assert found.read_text() == "checked"
    assert not (tmp_path / "mlruns").exists()  # the test's working folder (conftest)
