"""A stop signal asks for a checkpoint and a clean exit; it is never an immediate death, unless
the rank is stuck: SIGTERM and no step for a few step times."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from ffjobs.train.stop import STOP_SIGNALS, StopRequest


@pytest.fixture
def restore_handlers():
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2])
def test_slurm_stop_signals_set_the_request(sig, restore_handlers, capsys):
    stop = StopRequest(rank=3)
    stop.install()
    assert not stop.requested
    assert signal.getsignal(sig) == stop._on_signal  # else the kill below ends pytest
    os.kill(os.getpid(), sig)  # handled synchronously in the main thread
    assert stop.requested
    assert f"rank 3: got signal {int(sig)}" in capsys.readouterr().err


def test_a_cancel_is_told_from_a_pre_emption_and_wins(restore_handlers, capsys):
    """USR1/USR2 come ahead of a pre-emption or the time limit: stop, and the job goes on
    (requeued); SIGTERM is a cancel: stop, no requeue, whatever came before it."""
    stop = StopRequest(rank=0)
    stop.install()
    os.kill(os.getpid(), signal.SIGUSR2)
    assert stop.requested and stop.requeue
    assert stop.agree(torch.device("cpu"), world_size=1) and stop.requeue
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.requested and not stop.requeue
    os.kill(os.getpid(), signal.SIGUSR1)
    assert not stop.requeue  # a cancel is never undone
    err = capsys.readouterr().err
    assert "(ahead of a pre-emption or the time limit)" in err and "(a cancel: no requeue)" in err


def _signalled_ranks(env, device) -> list[bool]:
    """Rank 0 gets USR2, rank 1 SIGTERM; what each rank agrees on: [requested, requeue]."""
    stop = StopRequest(env.rank)
    stop.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2 if env.rank == 0 else signal.SIGTERM)
        stop.agree(device, env.world_size)
        return [stop.requested, stop.requeue]
    finally:
        stop.uninstall()


def test_ranks_agree_that_a_cancel_on_any_of_them_is_a_cancel():
    from train.helpers import run_ranks  # tests/ is on sys.path (rootdir conftest)

    assert run_ranks(2, _signalled_ranks) == [True, False]


def test_the_handlers_found_are_given_back(restore_handlers):
    def caller_handler(signum, frame):  # a process that trains in-process: its own handling
        pass

    for sig in STOP_SIGNALS:
        signal.signal(sig, caller_handler)
    stop = StopRequest(rank=0)
    stop.install()
    assert all(signal.getsignal(sig) == stop._on_signal for sig in STOP_SIGNALS)
    stop.uninstall()
    assert all(signal.getsignal(sig) is caller_handler for sig in STOP_SIGNALS)


def test_one_rank_agrees_with_itself():
    stop = StopRequest(rank=0)
    assert stop.agree(torch.device("cpu"), world_size=1) is False
    stop.requested = True
    assert stop.agree(torch.device("cpu"), world_size=1) is True


RANK = """
import sys, time
from ffjobs.train.stop import StopRequest
stop = StopRequest(rank=1)
stop.install()
for _ in range(5):  # a few 50 ms steps: the grace is max(1 s, 3 x 50 ms)
    stop.step_started()
    time.sleep(0.05)
print("ready", flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)  # a peer died: this rank never starts another step
else:
    for _ in range(60):  # a live rank: steps keep starting until the loop reads the request
        stop.step_started()
        time.sleep(0.05)
        if stop.requested:
            print("checkpoint and stop", flush=True)
            sys.exit(0)
"""


def _rank_after_sigterm(mode: str) -> tuple[int, str, float]:
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", RANK, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out + err, time.monotonic() - sent


def test_a_stuck_rank_exits_soon_after_sigterm_instead_of_waiting_for_sigkill():
    code, output, seconds = _rank_after_sigterm("hang")
    assert code == 128 + signal.SIGTERM, output
    assert "no training step started within 1.0 s" in output
    assert seconds < 10  # the grace is 1 s; SLURM's SIGKILL would come after KillWait (30 s)


def test_a_live_rank_still_checkpoints_and_stops_after_sigterm():
    code, output, _ = _rank_after_sigterm("live")
    assert code == 0 and "checkpoint and stop" in output, output


def test_grace_is_a_few_step_times_and_long_before_any_step_time_is_known():
    from ffjobs.train.stop import MIN_GRACE_S, UNKNOWN_STEP_GRACE_S

    stop = StopRequest(rank=0)
    assert stop.grace_s() == UNKNOWN_STEP_GRACE_S
    stop._step_starts = [0.0, 50.0, 52.0, 54.0, 56.0]  # a 50 s first step (compile), then 2 s
    assert stop.grace_s() == 6.0
    stop._step_starts = [0.0, 0.1, 0.2, 0.3]
    assert stop.grace_s() == MIN_GRACE_S
