"""Checkpoints on s3:// through boto3, against a real S3-compatible server on loopback."""

from __future__ import annotations

import pytest
import torch

from ffjobs.train.checkpoint import Checkpointer, CheckpointWarning, capture_rng_state, data_name
from ffjobs.train.faults import corrupt_blob

pytestmark = pytest.mark.integration


def test_s3_save_prune_verify_and_fallback(s3_env):
    import boto3

    boto3.client("s3").create_bucket(Bucket="ckpt")
    ckpt = Checkpointer("s3://ckpt/run-1/checkpoints", keep=2)
    for step in (1, 2, 3):
        ckpt.save(step, {"w": torch.full((8,), float(step))}, {"rng": capture_rng_state()})
    assert ckpt.steps() == [3, 2]
    corrupt_blob(ckpt.store, data_name(3), mode="truncate")
    with pytest.warns(CheckpointWarning, match=r"s3://ckpt/run-1/checkpoints/step-00000003\.pt"):
        ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 2
    assert torch.equal(ckpt.load(ref)["w"], torch.full((8,), 2.0))
