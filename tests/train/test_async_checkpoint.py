"""Asynchronous checkpoints: training goes on while a host snapshot is written in the background,
and a writer that dies or fails mid-write never costs the previous verified checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from ffjobs.train.checkpoint import Checkpointer, data_name, manifest_name
from ffjobs.train.job import TrainJob
from ffjobs.train.storage import LocalStore
from ffjobs.train.worker import run_rank

from .helpers import final_weights, tiny_config


def _state(value: float) -> dict:
    return {"weights": torch.full((256, 256), value), "meta": {"lr": 1e-3}}


class GatedStore(LocalStore):
    """A local store whose data-file writes wait for ``gate`` (or fail when ``fail`` is set)."""

    def __init__(self, directory, fail: bool = False):
        super().__init__(directory)
        self.gate = threading.Event()
        self.fail = fail

    def write(self, name: str, data: bytes) -> None:
        if name.endswith(".pt") and name != data_name(1):
            self.gate.wait(timeout=30)
            if self.fail:
                raise OSError(28, "No space left on device (injected)")
        super().write(name, data)


def test_async_save_returns_before_the_write_and_keeps_the_state_at_save_time(tmp_path):
    store = GatedStore(tmp_path)
    ckpt = Checkpointer(str(tmp_path), store=store)
    state = _state(2.0)
    location = ckpt.save(2, state, {"rank": 0}, asynchronous=True)
    assert location == str(tmp_path / data_name(2))
    assert not (tmp_path / manifest_name(2)).exists()  # still writing: not a checkpoint yet
    state["weights"].add_(1.0)  # training goes on updating its tensors in place
    store.gate.set()
    ckpt.wait()
    ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 2
    assert torch.equal(ckpt.load(ref)["weights"], torch.full((256, 256), 2.0))
    timing = ckpt.timings[-1]
    assert timing.step == 2 and timing.write_s is not None and timing.blocked_s >= 0.0


def test_failed_background_write_raises_at_wait_and_keeps_the_previous_checkpoint(tmp_path):
    store = GatedStore(tmp_path, fail=True)
    ckpt = Checkpointer(str(tmp_path), store=store)
    ckpt.save(1, _state(1.0), {"rank": 0})
    ckpt.save(2, _state(2.0), {"rank": 0}, asynchronous=True)
    store.gate.set()
    with pytest.raises(RuntimeError, match="No space left"):
        ckpt.wait()
    ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 1
    assert torch.equal(ckpt.load(ref)["weights"], torch.full((256, 256), 1.0))


# A process that checkpoints step 1, then starts an asynchronous save of step 2 whose data file
# stalls half written; it reports both moments so the test can SIGKILL it mid-write.
_KILLED_WRITER = """
import os, sys, time, tempfile
from pathlib import Path
import torch
from ffjobs.train.checkpoint import Checkpointer, data_name
from ffjobs.train.storage import LocalStore

directory = Path(sys.argv[1])

class HalfWritingStore(LocalStore):
    def write(self, name, data):
        if name != data_name(2):
            return super().write(name, data)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.", suffix=".tmp")
        os.write(fd, data[: len(data) // 2])
        os.fsync(fd)
        (directory.parent / "writing").touch()
        time.sleep(600)

ckpt = Checkpointer(str(directory), store=HalfWritingStore(directory))
big = {"weights": torch.randn(2048, 2048)}
ckpt.save(1, big, {"rank": 0})
ckpt.save(2, {"weights": big["weights"] + 1}, {"rank": 0}, asynchronous=True)
(directory.parent / "returned").touch()  # training would go on from here
time.sleep(600)
"""


def test_writer_killed_mid_write_leaves_the_previous_checkpoint_latest(tmp_path):
    directory = tmp_path / "ckpt"
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_KILLED_WRITER), str(directory)], env=env
    )
    try:
        deadline = time.monotonic() + 120
        while not ((tmp_path / "writing").exists() and (tmp_path / "returned").exists()):
            assert child.poll() is None, f"writer process exited early ({child.returncode})"
            assert time.monotonic() < deadline, "writer never reached the middle of its write"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert [p for p in directory.iterdir() if p.name.endswith(".tmp")]  # it died mid-write
    assert not (directory / manifest_name(2)).exists()
    ckpt = Checkpointer(str(directory))
    ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 1
    assert ckpt.load(ref)["weights"].shape == (2048, 2048)


def test_async_checkpoints_resume_bitwise_like_sync_ones(tmp_path):
    common = ["train.checkpoint_every=3", "train.keep_checkpoints=5"]
    straight = tiny_config(tmp_path / "sync", *common, "train.steps=6")
    assert run_rank(TrainJob.of(straight, data="memory"))["final_step"] == 6

    async_run = [*common, "train.async_checkpoint=true"]
    first = tiny_config(tmp_path / "async", *async_run, "train.steps=3")
    assert run_rank(TrainJob.of(first, data="memory"))["final_step"] == 3
    longer = tiny_config(tmp_path / "async", *async_run, "train.steps=6")
    second = run_rank(TrainJob.of(longer, data="memory"))
    assert second["start_step"] == 3 and second["final_step"] == 6

    expected = final_weights(tmp_path / "sync" / "ckpt")
    resumed = final_weights(tmp_path / "async" / "ckpt")
    assert resumed["step"] == expected["step"] == 6
    for net in ("generator", "discriminator", "ema"):
        for key, value in expected[net].items():
            assert torch.equal(value, resumed[net][key]), f"{net}.{key}"
