"""A local launch's ranks as forks of one process that imported what they need first.

Every rank of a launch imports the same modules before it does any work: torch alone costs one
to two CPU-seconds, Dynamo another second. Started one interpreter each, N ranks pay that N
times over. Here the launcher (:mod:`ffjobs.local_ranks`) starts one parent process,
``python -m ffjobs.forked_ranks ENTRY``, which imports the modules the caller names, then
forks the ranks; each rank runs ``ENTRY`` as ``python -m ENTRY ARGS...`` would, with its own
environment, arguments and output. A rank differs from one started by exec in what was fixed
before the fork: the modules were imported under the environment the ranks share (what differs
between them, ``RANK`` and ``LOCAL_RANK``, is set after it), and ``ps`` and
``/proc/PID/environ`` show the parent's command line and environment, not the rank's (its log,
``rank-N.log``, and the launcher's messages name it).

The parent is small and single-minded. It reports on its status pipe when each rank starts
(``started RANK PID``) and ends (``ended RANK CODE``, the code as
:attr:`subprocess.Popen.returncode` gives it), passes the stop signals
(:data:`FORWARDED_SIGNALS`) on to the ranks, and kills them all when its
standard input closes: the launcher closes it to stop them, and its death closes it too. It ends
with its last rank. A rank gets the parent-death signal from it, the parent from the launcher
(:mod:`ffjobs.process_tree`), so ``kill -9`` of the launcher still ends them all.

The parent's own output is rank 0's: an import that fails before any fork lands in rank 0's log,
and the launcher reports it as rank 0's end.

Standard library only at import (the launcher imports it without torch).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ffjobs.process_tree import die_with_parent

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
"""Pre-emption and time-limit signals: the launcher passes them on to the parent, the parent to
every rank, and the ranks checkpoint and stop."""
KILL_WAIT_S = 30.0
"""How long the launcher waits for the parent to reap the ranks it was told to kill."""


class ForkedRanks:
    """The launcher's handle on one launch's ranks: start them, learn their ends in the order
    they came, signal them, kill them."""

    def __init__(
        self,
        entry: str,
        argvs: Sequence[Sequence[str]],
        envs: Sequence[Mapping[str, str]],
        outputs: Sequence[int],
        preload: Sequence[str] = (),
    ) -> None:
        """Start ``len(argvs)`` ranks of ``python -m entry``: rank ``r`` with arguments
        ``argvs[r]``, environment ``envs[r]`` and stdout and stderr on file descriptor
        ``outputs[r]`` (which the caller closes after this returns)."""
        shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs[1:])}
        status_read, status_write = os.pipe()
        spec = {
            "launcher": os.getpid(),
            "entry": entry,
            "preload": list(preload),
            "status": status_write,
            "ranks": [
                {"argv": list(argv), "env": dict(env), "output": fd}
                for argv, env, fd in zip(argvs, envs, outputs, strict=True)
            ],
        }
        try:
            self._parent = subprocess.Popen(
                [sys.executable, "-m", __name__, entry],
                stdin=subprocess.PIPE,
                stdout=outputs[0],
                stderr=outputs[0],
                pass_fds=(status_write, *outputs),
                env=shared,
            )
        finally:
            os.close(status_write)
        self._nproc = len(argvs)
        self._ended: list[tuple[int, int]] = []
        self._reported = threading.Event()
        self._reader = threading.Thread(
            target=self._read_status, args=(status_read,), name="ffjobs-rank-status", daemon=True
        )
        self._reader.start()
        # the parent reads its job before importing anything; the pipe stays open: closing it
        # is how the ranks are killed
        with contextlib.suppress(BrokenPipeError):  # it died already: ended() tells how
            self._parent.stdin.write(json.dumps(spec).encode() + b"\n")
            self._parent.stdin.flush()

    def ended(self) -> list[tuple[int, int]]:
        """``(rank, code)`` of each rank that ended, in the order they ended; the code as
        :attr:`subprocess.Popen.returncode` gives it. Ranks the parent never reported (it
        failed before forking them, or was killed) end last, with the parent's own status."""
        ended = list(self._ended)
        if self._reported.is_set() and self._parent.poll() is not None:
            code = self._parent.returncode or -signal.SIGKILL
            known = {rank for rank, _ in ended}
            ended += [(rank, code) for rank in range(self._nproc) if rank not in known]
        return ended

    def send_signal(self, signum: int) -> None:
        """Pass a stop signal on to every rank still running (through the parent)."""
        if self._parent.poll() is None:
            self._parent.send_signal(signum)

    def kill(self) -> None:
        """Kill every rank still running and wait until the parent has reaped them all."""
        with contextlib.suppress(OSError):
            self._parent.stdin.close()
        try:
            self._parent.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # a stuck parent: its death kills the ranks
            self._parent.kill()
            self._parent.wait()
        self._reader.join(timeout=10)

    def _read_status(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as status:
            for line in status:
                what, rank, value = line.decode().split()
                if what == "ended":
                    self._ended.append((int(rank), int(value)))
        self._reported.set()


def main() -> int:
    """The parent: read the job, import, fork the ranks, report their ends, then end. In a
    forked rank, returns into the interpreter's own exit once the entry has run."""
    spec = json.loads(sys.stdin.buffer.readline())
    die_with_parent(spec["launcher"])
    gc.disable()  # imports make objects that live on, not garbage: no collection to run
    for name in spec["preload"]:
        importlib.import_module(name)
    if select.select([0], [], [], 0)[0] and not os.read(0, 4096):
        return 0  # killed while importing: no rank to start
    status, ranks = spec["status"], spec["ranks"]
    me = os.getpid()
    live: dict[int, int] = {}
    # woken by a rank's end (SIGCHLD) or the launcher's word on standard input, nothing else
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # the imported modules' objects live as long as the ranks: out of the collector's sight, a
    # rank's collections neither walk them nor copy the pages they sit on
    gc.freeze()
    gc.enable()
    # a stop signal that comes while the ranks are forked waits until all exist, then reaches
    # them all
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
    for rank, job in enumerate(ranks):
        with warnings.catch_warnings():
            # numpy's OpenBLAS server thread, started by importing torch, is fork-safe (it
            # registers pthread_atfork handlers); Python 3.12 warns of any thread at fork
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            inherited = [status, wake_read, wake_write, *(r["output"] for r in ranks)]
            return _run_rank(spec["entry"], job, me, inherited)
        live[pid] = rank
        _report(status, "started", rank, pid)
    for job in ranks:
        os.close(job["output"])

    def forward(signum: int, _frame: object) -> None:
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the ranks directly
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    killing = False
    while True:
        # no signal is passed on while a reaped rank is still listed: its pid may be reused
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        while live and (ended := os.waitpid(-1, os.WNOHANG))[0]:
            pid, wait_status = ended
            _report(status, "ended", live.pop(pid), os.waitstatus_to_exitcode(wait_status))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
        if not live:
            return 0
        readable, _, _ = select.select([wake_read] + ([] if killing else [0]), [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        if 0 in readable and not os.read(0, 4096):  # the launcher closed it, or is gone
            killing = True
            forward(signal.SIGKILL, None)


def _report(fd: int, *words: object) -> None:
    os.write(fd, (" ".join(map(str, words)) + "\n").encode())


def _run_rank(entry: str, job: dict[str, Any], parent: int, inherited: list[int]) -> int:
    """In a forked rank: become ``python -m entry *argv`` with the rank's environment and
    output, and run it. What it raises (``SystemExit`` included) ends the process as it would
    end that interpreter: this process's own ``main`` is its caller."""
    die_with_parent(parent)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(job["output"], 1)
    os.dup2(job["output"], 2)
    for fd in {devnull, *inherited}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(job["env"])
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    sys.argv = [entry, *job["argv"]]
    runpy.run_module(entry, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
