"""A stop signal asks for a checkpoint and a clean exit; it is never an immediate death."""

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


def test_one_rank_agrees_with_itself():
    stop = StopRequest(rank=0)
    assert stop.agree(torch.device("cpu"), world_size=1) is False
    stop.requested = True
    assert stop.agree(torch.device("cpu"), world_size=1) is True
