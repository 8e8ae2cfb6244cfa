"""The same validation and loading against s3:// on a real S3-compatible server (moto, loopback)."""

from __future__ import annotations

import json

import pytest

from ffjobs.cli import main
from ffjobs.config import load_config
from ffjobs.config.data import ValidationConfig
from ffjobs.data.dataset import FacePairDataset
from ffjobs.data.index import build_index, index_from_config
from ffjobs.data.validate import validate_dataset

from .conftest import upload_dataset
from .test_validate import assert_every_planted_defect_found

pytestmark = pytest.mark.integration


def test_corrupt_dataset_on_s3(s3_endpoint, s3_env, corrupt_dataset, tmp_path):
    uri = upload_dataset(s3_endpoint, corrupt_dataset, "faces-corrupt", "v1")
    planted = json.loads((corrupt_dataset / "planted.json").read_text())
    config = ValidationConfig(cache_dir=str(tmp_path))
    report = validate_dataset(uri, config)
    # S3 has no symlinks (the escaping link is not uploaded, so its manifest row is missing);
    # the ../ manifest row still escapes the prefix and is rejected.
    traversal = f"../{corrupt_dataset.name}.outside/secret.png"
    assert report.checks["path_escape"]["examples"] == [traversal]
    assert sorted(report.checks["missing_file"]["examples"]) == [
        "id_0009/escape.jpg",
        "id_0011/ghost.jpg",
    ]
    assert_every_planted_defect_found(report, planted, skip={"path_escape", "missing_file"})
    assert not report.passed
    again = validate_dataset(uri, config)
    assert again.timing["inspected"] == 0 and again.fingerprint == report.fingerprint


def test_clean_dataset_on_s3_validates_and_loads(s3_endpoint, s3_env, clean_dataset, tmp_path):
    uri = upload_dataset(s3_endpoint, clean_dataset, "faces-clean", "v1")
    report = validate_dataset(uri, ValidationConfig(cache_dir=str(tmp_path), workers=2))
    assert report.passed and report.files == 192 and report.layout == "identity_folders"
    index = build_index(uri, cache_dir=tmp_path)
    assert index.fingerprint == report.fingerprint
    local = validate_dataset(clean_dataset, ValidationConfig(cache_dir=str(tmp_path / "l")))
    assert local.fingerprint == report.fingerprint  # same content, same version name
    item = FacePairDataset(index, 32, 0.5, seed=0)[0]
    assert item["target"].shape == (3, 32, 32)


def test_validate_and_index_use_the_s3_section(
    s3_endpoint, s3_env, clean_dataset, tmp_path, monkeypatch, capsys
):
    uri = upload_dataset(s3_endpoint, clean_dataset, "faces-section", "v1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing answers there
    overrides = [f"data.source={uri}", f"s3.endpoint_url={s3_endpoint}", "s3.region=us-east-1",
                 f"data.validation.cache_dir={tmp_path}"]  # fmt: skip
    report = tmp_path / "r" / "report.json"
    sets = [arg for item in overrides for arg in ("--set", item)]
    assert main(["validate", "--report", str(report), "--json", *sets]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == 192
    config = load_config(None, overrides)
    assert len(index_from_config(config.data, s3=config.s3)) == 192


def test_forked_worker_builds_its_own_client(s3_env):
    """A forked validation worker must not reuse the parent's boto3 client (shared sockets).

    The source reaches the worker as the pool initializer's argument, inherited through fork
    (not pickled), exactly as validation hands it over.
    """
    import multiprocessing

    from ffjobs.data.sources import S3Source

    source = S3Source("s3://bucket/prefix")
    parent_client = source.client
    context = multiprocessing.get_context("fork")
    with context.Pool(1, _keep_source, (source,)) as pool:
        reused = pool.apply(_worker_reuses_client, (id(parent_client),))
    assert reused is False
    assert source.client is parent_client  # the parent keeps its own


_inherited: dict = {}


def _keep_source(source) -> None:
    _inherited["source"] = source


def _worker_reuses_client(parent_client_id: int) -> bool:
    return id(_inherited["source"].client) == parent_client_id


def test_an_s3_dataset_that_changed_since_validation_is_refused_by_key(
    s3_endpoint, s3_env, clean_dataset, tmp_path
):
    import boto3

    from ffjobs.data.index import DatasetChangedError, write_validated_files
    from ffjobs.data.sources import S3Source

    uri = upload_dataset(s3_endpoint, clean_dataset, "faces-changed", "v1")
    report = validate_dataset(uri, ValidationConfig(cache_dir=str(tmp_path)), keep_files=True)
    files = write_validated_files(report.validated, tmp_path / "files.jsonl.gz")
    assert len(build_index(uri, cache_dir=tmp_path, validated=files)) == 192

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.delete_object(Bucket="faces-changed", Key="v1/id_0002/01.jpg")
    other = (clean_dataset / "id_0000" / "00.jpg").read_bytes()
    client.put_object(Bucket="faces-changed", Key="v1/id_0003/02.jpg", Body=other)
    with pytest.raises(DatasetChangedError) as caught:
        build_index(uri, cache_dir=tmp_path, validated=files)
    assert "1 removed (s3://faces-changed/v1/id_0002/01.jpg)" in str(caught.value)
    assert "1 changed (s3://faces-changed/v1/id_0003/02.jpg)" in str(caught.value)
    # one that vanishes while training reads it is named by the same key
    with pytest.raises(FileNotFoundError, match="s3://faces-changed/v1/id_0002/01.jpg"):
        S3Source(uri).read_bytes("id_0002/01.jpg")
