"""``ffjobs run``, the README's main job: every stage runs, in order, into one MLflow run;
the first stage that says no stops the pipeline with its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICK = [
    "--set", "train.steps=4",
    "--set", "train.checkpoint_every=2",
    "--set", "train.log_every=2",
    "--set", "train.batch_size=4",
    "--set", "model.identity_weights=null",
    "--set", "data.synth.identities=6",
    "--set", "data.synth.per_identity=4",
]  # fmt: skip


def ffjobs_run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "ffjobs.cli",
        "run",
        "--config",
        str(REPO / "configs/local.yaml"),
    ]
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_whole_pipeline_runs_and_records_one_mlflow_run(tmp_path):
    result = ffjobs_run(tmp_path, *QUICK, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert [s["name"] for s in summary["stages"]] == ["validate", "preflight", "train"]
    assert all(s["status"] == "passed" for s in summary["stages"])
    assert "PASS" in summary["stages"][1]["summary"]
    assert "steps 0 -> 4" in summary["stages"][2]["summary"]
    run_dir = tmp_path / summary["run_dir"]
    assert (run_dir / "validation" / "report.json").exists()
    assert json.loads((run_dir / "summary.json").read_text())["passed"] is True

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs/mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.data.tags["ffjobs.validate"] == "passed"
    assert run.data.tags["ffjobs.train"] == "passed"
    assert run.data.params["train.steps"] == "4"
    assert "validate_seconds" in run.data.metrics
    # training logged into the pipeline's run, not a run of its own
    assert any(key.startswith("loss") or "img" in key for key in run.data.metrics), run.data.metrics
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "validate")}
    assert "validate/report.json" in artifacts
    experiment = client.get_experiment_by_name("ffjobs")
    assert len(client.search_runs([experiment.experiment_id])) == 1


def test_failed_validation_stops_before_training(tmp_path):
    from ffjobs.data.synth import generate_dataset

    dataset = generate_dataset(tmp_path / "bad", identities=12, per_identity=3, corrupt=True)
    result = ffjobs_run(tmp_path, *QUICK, "--set", f"data.source={dataset}",
                        "--set", "data.validation.max_bad_fraction=0.0")  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    assert "[ failed] validate" in result.stdout
    assert "train" not in result.stdout.split("[ failed] validate")[1]
    assert "pipeline FAILED" in result.stdout


def test_unknown_stage_is_a_usage_error(tmp_path):
    result = ffjobs_run(tmp_path, "--stages", "validate,deploy")
    assert result.returncode == 2
    assert "--stages: unknown stage deploy" in result.stderr
    assert "Traceback" not in result.stderr
