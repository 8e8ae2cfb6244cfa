"""Fault drills end with a failed launch, never a silent hang (2 gloo ranks, tiny model)."""

from __future__ import annotations

import time

import pytest

from ffjobs.train.launch import LaunchFailed, launch_local

from .helpers import tiny_config


def test_raise_inside_the_allreduce_fails_the_job(tmp_path):
    config = tiny_config(tmp_path, "train.faults.raise_in_collective_at_step=2")
    with pytest.raises(LaunchFailed) as failure:
        launch_local(config, 2, data="memory", quiet_stdout=True)
    assert failure.value.returncode == 1


def test_hung_rank_makes_its_peer_time_out_within_the_collective_timeout(tmp_path):
    config = tiny_config(
        tmp_path,
        "train.faults.hang_rank=1",
        "train.faults.hang_at_step=2",
        "train.collective_timeout_s=5",
    )
    started = time.monotonic()
    with pytest.raises(LaunchFailed) as failure:
        launch_local(config, 2, data="memory", quiet_stdout=True)
    assert failure.value.rank == 0  # the healthy rank noticed; the hung one was stopped
    assert time.monotonic() - started < 60
