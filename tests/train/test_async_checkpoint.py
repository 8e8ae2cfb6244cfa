"""Asynchronous checkpoints: training goes on while a host snapshot is written by the writer
process, and a writer that dies or fails mid-write never costs the previous verified
checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import torch

from ffjobs.train.checkpoint import (
    Checkpointer,
    CheckpointWarning,
    data_name,
    manifest_name,
    snapshot,
)
from ffjobs.train.job import TrainJob
from ffjobs.train.worker import run_rank

from .helpers import final_weights, tiny_config
from .stores import GatedStore, HalfWritingStore, wait_for


def _state(value: float) -> dict:
    # mixed dtypes and an empty tensor: each lands at its own place in the shared buffer
    extra = {"empty": torch.zeros(0, 4), "flags": torch.ones(3, dtype=torch.bool)}
    return {"weights": torch.full((256, 256), value), "meta": {"lr": 1e-3}, **extra}


def _gone(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` has exited (a zombie nobody reaped yet counts) within the time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_async_save_returns_before_the_write_and_keeps_the_state_at_save_time(tmp_path):
    directory, gate = tmp_path / "ckpt", tmp_path / "gate"
    ckpt = Checkpointer(str(directory), store=GatedStore(directory, gate))
    try:
        state = _state(2.0)
        location = ckpt.save(2, state, {"rank": 0}, asynchronous=True)
        assert location == str(directory / data_name(2))
        state["weights"].add_(1.0)  # training goes on updating its tensors in place
        assert not (directory / manifest_name(2)).exists()  # still writing: not a checkpoint
        gate.touch()
        ckpt.wait()
        ref = ckpt.latest_verified()
        assert ref is not None and ref.step == 2
        loaded = ckpt.load(ref)
        assert torch.equal(loaded["weights"], torch.full((256, 256), 2.0))
        assert loaded["empty"].shape == (0, 4) and loaded["flags"].dtype == torch.bool
        timing = ckpt.timings[-1]
        assert timing.step == 2 and timing.write_s is not None and timing.blocked_s >= 0.0
        # the next save reuses the shared buffer and writes the state as it is now
        ckpt.save(3, state, {"rank": 0}, asynchronous=True)
        ckpt.wait()
        assert torch.equal(ckpt.load(ckpt.latest_verified())["weights"], state["weights"])
    finally:
        ckpt.close()


def test_failed_background_write_raises_at_wait_and_keeps_the_previous_checkpoint(tmp_path):
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(1, _state(1.0), {"rank": 0})
    (tmp_path / data_name(2)).mkdir()  # a directory in the way: the rename onto it fails
    try:
        ckpt.save(2, _state(2.0), {"rank": 0}, asynchronous=True)
        with pytest.raises(RuntimeError, match="background checkpoint write failed: .*Is a dir"):
            ckpt.wait()
        assert not (tmp_path / manifest_name(2)).exists()
        ref = ckpt.latest_verified()
        assert ref is not None and ref.step == 1
        assert torch.equal(ckpt.load(ref)["weights"], torch.full((256, 256), 1.0))
    finally:
        ckpt.close()


def test_writer_killed_mid_write_leaves_the_previous_checkpoint_latest(tmp_path):
    directory, writing = tmp_path / "ckpt", tmp_path / "writing"
    ckpt = Checkpointer(str(directory), store=HalfWritingStore(directory, writing))
    try:
        big = {"weights": torch.randn(2048, 2048)}
        ckpt.save(1, big, {"rank": 0})
        ckpt.save(2, {"weights": big["weights"] + 1}, {"rank": 0}, asynchronous=True)
        wait_for(writing)
        assert ckpt.writer_pid is not None
        os.kill(ckpt.writer_pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match=r"writer process .* exited with code -9"):
            ckpt.wait()
        assert [p for p in directory.iterdir() if p.name.endswith(".tmp")]  # died mid-write
        assert not (directory / manifest_name(2)).exists()
        fresh = Checkpointer(str(directory))
        ref = fresh.latest_verified()
        assert ref is not None and ref.step == 1
        assert torch.equal(fresh.load(ref)["weights"], big["weights"])
        # the next asynchronous save starts a new writer
        ckpt.save(3, big, {"rank": 0}, asynchronous=True)
        ckpt.wait()
        assert ckpt.steps()[0] == 3
    finally:
        ckpt.close()


def test_no_writer_process_is_left_once_the_checkpointer_is_closed(tmp_path):
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(1, _state(1.0), {"rank": 0}, asynchronous=True)
    pid = ckpt.writer_pid
    assert pid is not None and psutil.pid_exists(pid)
    ckpt.close()  # finishes the write in flight first
    assert ckpt.steps() == [1]
    assert not psutil.pid_exists(pid)  # exited and reaped by close()


def test_too_little_shared_memory_saves_synchronously_and_says_so(tmp_path, monkeypatch):
    # /dev/shm itself is not made small here: a container's 64 MiB default is what this stands for
    monkeypatch.setattr(snapshot, "shared_memory_free", lambda: 2**20)
    ckpt = Checkpointer(str(tmp_path))
    with pytest.warns(
        CheckpointWarning,
        match=r"needs 4 MiB of shared memory and /dev/shm has 1 MiB free: writing checkpoint "
        r"step 1 synchronously",
    ):
        ckpt.save(1, {"weights": torch.zeros(1024, 1024)}, {"rank": 0}, asynchronous=True)
    assert ckpt.writer_pid is None and ckpt.steps() == [1]  # written, by this process
    assert ckpt.load(ckpt.latest_verified())["weights"].shape == (1024, 1024)


# A training process that starts an asynchronous save, reports its writer's pid once the write
# is done, and idles: the test kills it with SIGKILL and expects the writer to follow.
_ORPHANED_WRITER = """
import sys, time
from pathlib import Path
import torch
from ffjobs.train.checkpoint import Checkpointer

if __name__ == "__main__":
    ckpt = Checkpointer(sys.argv[1])
    ckpt.save(1, {"weights": torch.ones(64)}, {"rank": 0}, asynchronous=True)
    ckpt.wait()
    # whole or not at all: the test kills this process as soon as the file exists
    Path(sys.argv[2] + ".tmp").write_text(str(ckpt.writer_pid))
    Path(sys.argv[2] + ".tmp").replace(sys.argv[2])
    time.sleep(600)
"""


def test_writer_exits_when_its_parent_is_killed(tmp_path):
    script, pid_file = tmp_path / "train.py", tmp_path / "writer.pid"
    script.write_text(textwrap.dedent(_ORPHANED_WRITER))
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "ckpt"), str(pid_file)], env=env
    )
    try:
        wait_for(pid_file, timeout_s=120)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    writer = int(pid_file.read_text())
    # it looks for its parent every POLL_S (0.5 s) while idle; 10 s leaves room for a busy CPU
    assert _gone(writer, timeout_s=10.0), f"writer {writer} outlived its killed parent"


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
