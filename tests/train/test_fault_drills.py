"""Fault drills end with a failed launch, never a silent hang (2 gloo ranks, tiny model), and
fire once per job (a restarted job resumes past them)."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from ffjobs.config.train import FaultInjection
from ffjobs.local_ranks import LaunchFailed
from ffjobs.train import faults
from ffjobs.train.checkpoint.storage import LocalStore
from ffjobs.train.faults import FaultInjector, InjectedFault, marker_name
from ffjobs.train.launch import launch_local

from .helpers import tiny_config


def test_raise_inside_the_allreduce_fails_the_job(tmp_path):
    config = tiny_config(tmp_path, "train.faults.raise_in_collective_at_step=2")
    with pytest.raises(LaunchFailed) as failure:
        launch_local(config, 2, data="memory", quiet_stdout=True)
    assert failure.value.returncode == 1


@pytest.mark.parametrize(
    ("error", "expected"),
    [("user_code", "ValueError: injected bug"), ("out_of_memory", "CUDA out of memory")],
)
def test_raise_drill_ends_the_launch_naming_the_rank_and_its_traceback(tmp_path, error, expected):
    config = tiny_config(
        tmp_path,
        "train.faults.raise_rank=1",
        "train.faults.raise_at_step=2",
        f"train.faults.raise_error={error}",
    )
    with pytest.raises(LaunchFailed) as failure:
        launch_local(config, 2, data="memory", quiet_stdout=True, log_dir=tmp_path / "logs")
    assert failure.value.rank == 1 and failure.value.returncode == 1
    assert expected in failure.value.log.read_text()  # the evidence a supervisor classifies
    assert f"its log: {failure.value.log}" in str(failure.value)


def test_every_time_drills_fire_in_every_run_of_the_job(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "ckpt")
    drill = FaultInjection(raise_rank=0, raise_at_step=3, every_time=True)
    for _ in range(2):  # a restart resumes below step 3 and meets the same failure again
        with pytest.raises(ValueError, match="injected bug"):
            FaultInjector(drill, rank=0, store=store).before_step(3)
    assert store.list() == []  # no marker: nothing remembers having fired


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


# --------------------------------------------------------------------- drills fire once per job


def _kill_injector(store, monkeypatch, kills):
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: kills.append(sig))
    return FaultInjector(FaultInjection(kill_rank=1, kill_at_step=3), rank=1, store=store)


def test_kill_drill_fires_once_per_checkpoint_store(tmp_path, monkeypatch):
    store, kills = LocalStore(tmp_path / "ckpt"), []
    first = _kill_injector(store, monkeypatch, kills)
    first.before_step(2)
    assert kills == [] and store.list() == []
    first.before_step(3)
    assert kills == [signal.SIGKILL]
    assert json.loads(store.read(marker_name("kill"))) | {"time": 0} == {
        "kind": "kill",
        "rank": 1,
        "step": 3,
        "time": 0,
    }
    # the restarted job resumes below step 3 and passes it without dying again
    restarted = _kill_injector(store, monkeypatch, kills)
    restarted.before_step(3)
    assert kills == [signal.SIGKILL]


def test_without_a_store_the_kill_drill_fires_in_every_run(monkeypatch):
    kills = []
    for _ in range(2):
        _kill_injector(None, monkeypatch, kills).before_step(3)
    assert kills == [signal.SIGKILL, signal.SIGKILL]


def test_raise_in_collective_fires_once_per_checkpoint_store(tmp_path):
    store = LocalStore(tmp_path / "ckpt")
    config = FaultInjection(raise_in_collective_at_step=2)

    def hook(state, bucket):
        return "reduced"

    first = FaultInjector(config, rank=0, store=store)
    faulty = first.wrap_comm_hook(hook)
    first.step = 2
    with pytest.raises(InjectedFault):
        faulty(None, None)
    assert FaultInjector(config, rank=0, store=store).wrap_comm_hook(hook) is hook


def test_no_step_drill_never_touches_the_store():
    class Untouchable:
        def list(self):
            raise AssertionError("listed the store without a drill")

    injector = FaultInjector(FaultInjection(), rank=0, store=Untouchable())
    injector.before_step(1)
    assert injector.already_fired == set()


# --------------------------------------------------------------------------- the pause


def test_a_paused_rank_waits_at_its_step_until_the_file_exists(tmp_path):
    go_on = tmp_path / "go-on"
    injector = FaultInjector(
        FaultInjection(pause_at_step=3, pause_until_file=str(go_on)), rank=0, store=None
    )
    injector.before_step(2)  # not the pause's step: no wait
    released_at: list[float] = []

    def release() -> None:
        time.sleep(0.3)
        released_at.append(time.monotonic())
        go_on.touch()

    releaser = threading.Thread(target=release)
    releaser.start()
    injector.before_step(3)
    returned_at = time.monotonic()
    releaser.join()
    assert released_at and returned_at >= released_at[0]  # it waited for the file
    injector.before_step(3)  # a restarted job meets the existing file: no wait


def test_a_stop_request_ends_the_pause_as_it_reaches_a_training_loop(tmp_path, capsys):
    """A cancel (SIGTERM) of a job held at its step: the rank trains the step, checkpoints and
    stops, instead of waiting for a file that never comes until SIGKILL."""
    injector = FaultInjector(
        FaultInjection(pause_at_step=3, pause_until_file=str(tmp_path / "never")), rank=1
    )
    asked: list[float] = []
    stopper = threading.Timer(0.3, lambda: asked.append(time.monotonic()))
    stopper.start()
    injector.before_step(3, stopping=lambda: bool(asked))
    assert asked and "paused; asked to stop" in capsys.readouterr().err


def test_the_pause_needs_its_file():
    with pytest.raises(ValueError, match="together"):
        FaultInjection(pause_at_step=3)
