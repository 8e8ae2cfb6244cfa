"""Synthetic datasets (clean and with every planted defect) and a real S3-compatible server."""

from __future__ import annotations

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
