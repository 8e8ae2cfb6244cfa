"""Synthetic datasets (clean and with every planted defect) and a real S3-compatible server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ffjobs.data.synth import generate_dataset


@pytest.fixture(scope="session")
def clean_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_dataset(
        tmp_path_factory.mktemp("clean") / "faces", identities=24, per_identity=8, size=64, seed=0
    )


@pytest.fixture(scope="session")
def corrupt_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_dataset(
        tmp_path_factory.mktemp("corrupt") / "faces",
        identities=24,
        per_identity=8,
        size=64,
        seed=0,
        corrupt=True,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server on loopback (a subprocess), with dummy credentials in the environment."""
    executable = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(executable).exists():
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    process = subprocess.Popen(
        [executable, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1)  # noqa: S310 - loopback only
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto_server did not start on {endpoint}")
            time.sleep(0.1)
    saved = {
        k: os.environ.get(k)
        for k in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
        )
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        process.terminate()
        process.wait(timeout=10)
        log.close()


def upload_dataset(endpoint: str, root: Path, bucket: str, prefix: str) -> str:
    """Upload a local dataset's regular files (symlinks have no S3 equivalent) to s3://."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=bucket)
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            client.put_object(
                Bucket=bucket,
                Key=f"{prefix}/{path.relative_to(root).as_posix()}",
                Body=path.read_bytes(),
            )
    return f"s3://{bucket}/{prefix}"
