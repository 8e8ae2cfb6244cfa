"""Fixtures of the trainer tests: a loopback S3 server and tiny training configs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-compatible server (moto_server) on 127.0.0.1; yields its URL."""
    pytest.importorskip("boto3")
    server = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(server).exists():
        pytest.skip("moto_server is not installed")
    port = _free_port()
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("moto_server did not start")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch):
    """Environment for boto3 to reach the loopback server with dummy credentials."""
    values = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)
