"""A run with params, metrics and an artifact, written to and read back from the real MLflow server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_run_round_trips_through_the_tracking_server(tmp_path, local_stack):
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    tracking_uri = local_stack["MLFLOW_TRACKING_URI"]
    assert tracking_uri.startswith("http://127.0.0.1:")
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = client.create_experiment(f"ffjobs-it-{uuid.uuid4().hex[:12]}")
    run = client.create_run(experiment_id, run_name="round-trip")
    run_id = run.info.run_id
    client.log_batch(
        run_id,
        params=[Param("train.lr", "0.0002"), Param("slurm.nodes", "2")],
        metrics=[Metric("loss", value, 0, step) for step, value in enumerate([1.5, 0.9, 0.4])],
    )
    report = tmp_path / "report.json"
    report.write_text('{"verdict": "PASS"}')
    client.log_artifact(run_id, str(report), artifact_path="preflight")
    client.set_terminated(run_id)

    fresh = MlflowClient(tracking_uri=tracking_uri)  # nothing cached from the writes
    stored = fresh.get_run(run_id)
    assert stored.info.status == "FINISHED"
    assert stored.data.params == {"train.lr": "0.0002", "slurm.nodes": "2"}
    history = fresh.get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (0, 1.5), (1, 0.9), (2, 0.4)]  # fmt: skip
    # Artifacts go through the server (proxied), not straight to a local path of this process.
    assert stored.info.artifact_uri.startswith("mlflow-artifacts:")
    assert [a.path for a in fresh.list_artifacts(run_id, "preflight")] == ["preflight/report.json"]
    local = fresh.download_artifacts(run_id, "preflight/report.json", str(tmp_path / "down"))
    assert Path(local).read_text() == '{"verdict": "PASS"}'
    # ... and the server stored it under its own artifact root in the stack's state directory.
    server_root = Path(local_stack["FFJOBS_STATE_DIR"]) / "mlflow" / "artifacts"
    assert list(server_root.glob(f"*/{run_id}/artifacts/preflight/report.json"))
