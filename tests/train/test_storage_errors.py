"""Storage that refuses a checkpoint (full, over quota, access denied) fails in one line naming
the folder and its free space, and leaves nothing that could be taken for a newer checkpoint:
the previous verified one stays the latest."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from ffjobs.train.checkpoint import Checkpointer, capture_rng_state, data_name, manifest_name
from ffjobs.train.checkpoint.storage import LocalStore, S3Store, StorageError

from .stores import FullStore


def _save(ckpt: Checkpointer, step: int, **options) -> None:
    ckpt.save(step, {"weights": torch.full((64, 64), float(step))}, {"rng": capture_rng_state()},
              **options)  # fmt: skip


def _only_checkpoint(folder, step: int) -> None:
    """``folder`` holds checkpoint ``step`` and nothing else (no hidden file, no orphan)."""
    assert sorted(p.name for p in folder.iterdir()) == [manifest_name(step), data_name(step)]
    ref, state = Checkpointer(str(folder)).load_latest()
    assert ref.step == step and torch.equal(state["weights"], torch.full((64, 64), float(step)))


def test_a_full_disk_names_the_folder_and_its_free_space_and_leaves_no_half_file(
    tmp_path, monkeypatch
):
    ckpt = Checkpointer(str(tmp_path), keep=3)
    _save(ckpt, 1)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # where a full tmpfs or ext4 says it at the latest
    with pytest.raises(StorageError) as raised:
        _save(ckpt, 2)
    message = str(raised.value)
    assert message.startswith(
        f"checkpoint folder {tmp_path}: No space left on device (ENOSPC) writing {data_name(2)} ("
    )
    assert " free of " in message and "\n" not in message and raised.value.code == "ENOSPC"
    monkeypatch.undo()
    _only_checkpoint(tmp_path, 1)


def test_a_manifest_that_cannot_be_written_takes_its_data_file_with_it(tmp_path):
    class NoManifest(LocalStore):
        def _write(self, name, data):
            if name == manifest_name(2):
                raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
            super()._write(name, data)

    ckpt = Checkpointer(str(tmp_path), store=NoManifest(tmp_path))
    _save(ckpt, 1)
    with pytest.raises(
        StorageError, match=r"Disk quota exceeded \(EDQUOT\) writing step-0+2\.json"
    ):
        _save(ckpt, 2)
    _only_checkpoint(tmp_path, 1)


def test_a_background_write_refused_raises_the_storage_error_in_the_trainer(tmp_path):
    ckpt = Checkpointer(str(tmp_path), store=FullStore(tmp_path))
    try:
        _save(ckpt, 1, asynchronous=True)
        _save(ckpt, 2, asynchronous=True)  # returns at once: the writer process fails
        with pytest.raises(StorageError) as raised:
            ckpt.wait()
    finally:
        ckpt.close()
    assert str(raised.value).startswith(
        f"background checkpoint write failed: checkpoint folder {tmp_path}: No space left on "
        f"device (ENOSPC) writing {data_name(2)}"
    )
    _only_checkpoint(tmp_path, 1)


def test_s3_access_denied_is_a_storage_error_other_s3_errors_are_not():
    from botocore.exceptions import ClientError

    class Refusing:
        def __init__(self, code):
            self.code = code

        def put_object(self, **_):
            error = {"Error": {"Code": self.code, "Message": "Access Denied"}}
            raise ClientError(error, "PutObject")

    store = S3Store("s3://bucket/ckpt/run", client=Refusing("AccessDenied"))
    with pytest.raises(StorageError) as raised:
        store.write(data_name(2), b"x" * 2048)
    assert str(raised.value) == (
        "checkpoint store s3://bucket/ckpt/run: access denied (AccessDenied) writing "
        "step-00000002.pt (2.0 KiB) to s3://bucket/ckpt/run/step-00000002.pt"
    )
    with pytest.raises(ClientError):  # a server's hiccup is not a refusal
        S3Store("s3://bucket/run", client=Refusing("InternalError")).write("x", b"x")
