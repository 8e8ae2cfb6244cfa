"""Fixtures shared across components: every test in its own working directory, a real
S3-compatible server and a real MLflow tracking server on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ffjobs.local_ranks import free_loopback_port


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative defaults (runs/data, runs/models, runs/checkpoints) land in the test's temp dir,
    never in the checkout: a stale file there would change what the next run does."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server (a subprocess on 127.0.0.1) for the whole session; yields its URL."""
    executable = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(executable).exists():
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    endpoint = f"http://127.0.0.1:{free_loopback_port()}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    process = subprocess.Popen(
        [executable, "-H", "127.0.0.1", "-p", endpoint.rsplit(":", 1)[1]],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1)  # noqa: S310 - loopback only
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto_server did not start on {endpoint}; see {log.name}")
            time.sleep(0.1)
    yield endpoint
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This test's environment pointed at the loopback server, with dummy credentials."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return dict(os.environ)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A real ``mlflow server`` (sqlite store, proxied artifacts) for the session; yields its
    :class:`mlflow_server.MlflowServer` (``.uri``). Tests that stop it make their own."""
    from mlflow_server import MlflowServer  # tests/ is on sys.path (rootdir conftest)

    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield server
    server.stop()
