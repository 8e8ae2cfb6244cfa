"""The registry under faults and tampering, against real MLflow servers: a registration cut
short by a lost server is finished by its retry, and a planted pickle in a registered model's
files is refused by ``ffjobs swap`` and by the evaluate stage's champion load without running."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from ffjobs.errors import ExitCode, UserError
from ffjobs.evaluate.champion import load_champion
from ffjobs.registry.publish import COMPLETE, REGISTRATION_TAG
from ffjobs.registry.weights import WEIGHTS_FILE
from ffjobs.runs.stages import run_stage
from ffjobs.tracking.mlflow_logger import mlflow_client

from .conftest import candidate_run
from .test_weights import plant_pickle

pytestmark = pytest.mark.slow  # the trained session fixture


def _config(trained, name, tracking_uri=None):
    config = copy.deepcopy(trained.config)
    config.registry.model_name = name
    if tracking_uri:
        config.tracking.tracking_uri = tracking_uri
    return config


def test_a_server_lost_after_version_creation_is_finished_by_the_retry(
    trained, tmp_path, monkeypatch
):
    from mlflow_server import MlflowServer  # tests/ is on sys.path (rootdir conftest)

    server = MlflowServer(tmp_path / "mlflow").start()
    try:
        name = "cut-short"
        config = _config(trained, name, server.uri)
        run = candidate_run(trained, config)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once while down
        create = MlflowClient.create_model_version

        def create_then_lose_the_server(self, *args, **kwargs):
            version = create(self, *args, **kwargs)
            server.stop()  # the version exists; the alias request that follows finds no one
            return version

        monkeypatch.setattr(MlflowClient, "create_model_version", create_then_lose_the_server)
        cut = run_stage(config, run, "register")
        assert cut.status == "failed" and cut.exit_code == ExitCode.RETRYABLE, cut.summary
        monkeypatch.setattr(MlflowClient, "create_model_version", create)

        server.start()
        client = mlflow_client(config.tracking)
        (left,) = client.search_model_versions(f"name='{name}'")
        assert not client.get_registered_model(name).aliases  # the fault hit where intended
        assert REGISTRATION_TAG not in left.tags

        retry = run_stage(config, run, "register")
        assert retry.status == "passed", retry.summary
        assert "left without its alias" in retry.summary and retry.facts["version"] == "1"
        (finished,) = client.search_model_versions(f"name='{name}'")  # still one version
        assert client.get_model_version_by_alias(name, "challenger").version == "1"
        assert finished.tags[REGISTRATION_TAG] == COMPLETE
        assert finished.description.startswith("# Face-swap model of run")

        again = run_stage(config, run, "register")  # complete now: nothing more to do
        assert again.status == "skipped" and "(the challenger, pending_review)" in again.summary
    finally:
        server.stop()


def _stored_file(mlflow_server, model_id: str, file_name: str):
    """The file ``file_name`` of logged model ``model_id`` in the server's artifact store."""
    (found,) = [
        p for p in (mlflow_server.root / "artifacts").rglob(file_name) if model_id in str(p)
    ]
    return found


def test_a_planted_pickle_in_the_registry_never_runs(trained, mlflow_server, tmp_path):
    name = "tampered"
    config = _config(trained, name)
    register = run_stage(config, candidate_run(trained, config), "register")
    assert register.status == "passed", register.summary
    marker = tmp_path / "code-ran"
    plant_pickle(_stored_file(mlflow_server, register.facts["model_id"], WEIGHTS_FILE), marker)

    face = next(p for p in sorted(trained.data.rglob("*")) if p.is_file())
    env = {**os.environ, "MLFLOW_TRACKING_URI": config.tracking.tracking_uri}
    swap = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "swap", "--model", f"models:/{name}@challenger",
         str(face), str(face), str(tmp_path / "out.png")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert swap.returncode == 2, swap.stderr[-2000:]
    assert swap.stderr.count("\n") == 1 and "Traceback" not in swap.stderr
    assert f"models:/{name}@challenger {WEIGHTS_FILE}: refused, not plain tensors" in swap.stderr
    assert not (tmp_path / "out.png").exists()

    MlflowClient(config.tracking.tracking_uri).set_registered_model_alias(
        name, "champion", register.facts["version"]
    )
    with pytest.raises(UserError, match=rf"models:/{name}/1 {WEIGHTS_FILE}: refused"):
        load_champion(config)  # what the evaluate stage compares against
    assert not marker.exists()
