"""The ``s3:`` section: one S3-compatible object store for datasets and checkpoints.

Both ``data.source`` and ``train.checkpoint_dir`` may be ``s3://`` URLs; they are read and written
through the same endpoint and region, so a MinIO or Ceph cluster is configured once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass
class S3Config:
    """Where ``s3://`` URLs live (AWS, MinIO, Ceph); credentials stay in the AWS environment."""

    endpoint_url: str | None = None
    """S3-compatible endpoint (``http://minio:9000``); empty: ``AWS_ENDPOINT_URL`` or AWS itself."""
    region: str | None = None
    """S3 region; empty: ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` or the profile's region."""

    def __post_init__(self) -> None:
        self.endpoint_url = self.endpoint_url or None
        self.region = self.region or None
        if self.endpoint_url and not self.endpoint_url.startswith(("http://", "https://")):
            raise ValueError(
                f"endpoint_url: must start with http:// or https://, got {self.endpoint_url!r}"
            )

    def client_options(self) -> dict[str, Any]:
        """``boto3.client("s3", **options)``: the setting, else the environment's endpoint."""
        return {
            "endpoint_url": self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None,
            "region_name": self.region,
        }
