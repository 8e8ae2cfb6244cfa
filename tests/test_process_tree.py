"""The local launcher's ranks end with it: told who launched them, SIGTERM passed on, and killed
when they do not stop within the grace (the whole tree: tests/integration/test_killed_run.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from ffjobs import local_ranks
from ffjobs.local_ranks import LaunchFailed, launch_ranks
from ffjobs.process_tree import LAUNCHER_VAR, is_running, process_start_time

# a rank that reports its launcher variable, then ignores SIGTERM and sleeps
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write(os.environ[sys.argv[2]])
time.sleep(120)
"""


def test_ranks_that_ignore_a_forwarded_sigterm_are_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(local_ranks, "STOP_GRACE_S", 1.0)
    ready = [tmp_path / f"ready-{rank}" for rank in range(2)]
    (tmp_path / "stubborn_rank.py").write_text(STUBBORN)

    def terminate_once_ready() -> None:
        while not all(p.exists() and p.read_text() for p in ready):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` of the launching command

    threading.Thread(target=terminate_once_ready, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(LaunchFailed, match=r"ranks did not stop within 1 s of SIGTERM"):
        launch_ranks(
            "stubborn_rank",
            lambda rank: [str(ready[rank]), LAUNCHER_VAR],
            2,
            tmp_path / "logs",
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
        )
    assert time.monotonic() - started < 30
    me = f"{os.getpid()}:{process_start_time(os.getpid())}"
    assert [p.read_text() for p in ready] == [me, me]


def test_a_process_is_told_by_its_pid_and_start_time():
    me = os.getpid()
    assert is_running(me, process_start_time(me))
    assert not is_running(me, process_start_time(me) + 1)  # a later process with this pid
    assert not is_running(2**22 + 1)  # above Linux's pid_max
