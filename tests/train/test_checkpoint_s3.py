"""Checkpoints on s3:// through boto3, against a real S3-compatible server on loopback, and at
the endpoint the ``s3:`` section names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

import ffjobs
from ffjobs.commands_runs import latest_checkpoint
from ffjobs.config import load_config
from ffjobs.config.s3 import S3Config
from ffjobs.runs.owner import found_on_resume, owner_record
from ffjobs.train.checkpoint import (
    Checkpointer,
    CheckpointWarning,
    capture_rng_state,
    data_name,
    latest_step,
    open_checkpoints,
)
from ffjobs.train.checkpoint.storage import LocalStore, S3Store, open_store
from ffjobs.train.faults import corrupt_blob

DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing answers S3 there


@pytest.mark.integration
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


@pytest.mark.integration
def test_configured_endpoint_wins_over_the_environment(s3_endpoint, s3_env, monkeypatch):
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="ckpt-config")
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD_ENDPOINT)
    s3 = S3Config(endpoint_url=s3_endpoint, region="us-east-1")
    ckpt = Checkpointer("s3://ckpt-config/run", keep=2, s3=s3)
    ckpt.save(7, {"w": torch.ones(4)}, {"rng": capture_rng_state()})
    ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 7
    listed = boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket="ckpt-config")
    assert {o["Key"] for o in listed["Contents"]} == {
        "run/step-00000007.pt",
        "run/step-00000007.json",
    }


@pytest.mark.integration
def test_a_runs_checkpoints_are_found_at_the_endpoint_its_config_names(s3_endpoint, monkeypatch):
    """The endpoint is in the run's config only (as the README recommends) and the environment
    names a dead one: the run's checkpoints are written, found and listed at the config's
    endpoint by the readers that open them through ``open_checkpoints``."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD_ENDPOINT)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="ckpt-run")
    config = load_config("local", [f"s3.endpoint_url={s3_endpoint}", "s3.region=us-east-1"])
    location = "s3://ckpt-run/checkpoints/run-1"
    ckpt = open_checkpoints(config, location)
    for step in (2, 4):
        ckpt.save(step, {"w": torch.ones(4) * step}, {"rng": capture_rng_state()})
    ckpt.close()
    found = open_checkpoints(config, location).latest()  # from the manifests only
    assert found is not None and (found.step, found.location) == (4, f"{location}/step-00000004.pt")
    assert latest_checkpoint(location, config) == {"step": 4, "location": found.location}
    record = {"status": "running", "checkpoint_dir": location, "owner": _gone_owner()}
    assert found_on_resume("run-1", record, config, latest_step).endswith("continuing from step 4")


def test_every_reader_of_a_runs_checkpoints_opens_them_in_one_place():
    """``open_checkpoints`` applies the run's ``s3:`` section; a ``Checkpointer`` built anywhere
    else would miss it. Allowed: the module itself and the writer process (handed the store)."""
    package = Path(ffjobs.__file__).parent
    built = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "Checkpointer(" in path.read_text()
    }
    assert built <= {
        "train/checkpoint/manager.py",
        "train/checkpoint/writer.py",
        "bench/checkpoint.py",
    }


def _gone_owner() -> dict:
    """This machine's owner record of a process that has ended (a child waited for)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return {**owner_record(), "pid": child.pid}


@pytest.mark.integration
def test_async_save_writes_through_the_writer_processs_own_s3_client(s3_endpoint, s3_env):
    import boto3

    boto3.client("s3").create_bucket(Bucket="ckpt-async")
    s3 = S3Config(endpoint_url=s3_endpoint, region="us-east-1")
    ckpt = Checkpointer("s3://ckpt-async/run", keep=2, s3=s3)
    try:
        state = {"w": torch.arange(1024, dtype=torch.float32)}
        for step in (1, 2, 3):
            ckpt.save(step, state, {"rng": capture_rng_state()}, asynchronous=True)
            state["w"].add_(1.0)  # changed in place right after each save
        ckpt.wait()
        assert ckpt.writer_pid is not None and ckpt.steps() == [3, 2]  # pruned by the writer
        ref = ckpt.latest_verified()
        assert ref is not None and ref.step == 3
        assert torch.equal(ckpt.load(ref)["w"], torch.arange(1024, dtype=torch.float32) + 2)
    finally:
        ckpt.close()


class _ClientRecorder:
    """Stands in for ``boto3.client`` and keeps the keyword arguments of every call."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, service, **kwargs):
        self.calls.append((service, kwargs))
        return object()


@pytest.fixture
def boto3_client(monkeypatch) -> _ClientRecorder:
    import boto3

    recorder = _ClientRecorder()
    monkeypatch.setattr(boto3, "client", recorder)
    return recorder


def test_store_client_uses_the_configured_endpoint_and_region(boto3_client, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD_ENDPOINT)
    s3 = S3Config(endpoint_url="http://minio.internal:9000", region="eu-west-1")
    store = open_store("s3://bucket/ckpt", s3=s3)
    assert isinstance(store, S3Store) and (store.bucket, store.prefix) == ("bucket", "ckpt")
    assert boto3_client.calls == [
        ("s3", {"endpoint_url": "http://minio.internal:9000", "region_name": "eu-west-1"})
    ]


@pytest.mark.parametrize("s3", [None, S3Config(), S3Config(endpoint_url="", region="")])
def test_empty_setting_falls_back_to_the_environment(boto3_client, monkeypatch, s3):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://from-env:9000")
    Checkpointer("s3://bucket/ckpt", s3=s3)
    assert boto3_client.calls == [
        ("s3", {"endpoint_url": "http://from-env:9000", "region_name": None})
    ]


def test_no_setting_and_no_environment_is_aws_itself(boto3_client, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    open_store("s3://bucket")
    assert boto3_client.calls == [("s3", {"endpoint_url": None, "region_name": None})]


def test_local_directory_needs_no_s3_client(boto3_client, tmp_path):
    assert isinstance(open_store(str(tmp_path), s3=S3Config(endpoint_url="http://x:1")), LocalStore)
    assert boto3_client.calls == []
