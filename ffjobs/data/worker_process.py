"""Worker processes that any program can start, an Airflow task included.

``fork`` copies this process in milliseconds, but it is only safe while the process has no
other thread (a lock another thread holds stays held in the child for good). Otherwise the
worker is a fresh interpreter; not multiprocessing's ``spawn`` or ``forkserver``, which re-run
the parent's main module in every child (from ``__main__.__file__``), and some main programs
cannot run twice: in an Airflow task it is the ``airflow`` command, whose import dies on the
database URL Airflow blocks inside tasks. The fresh interpreter starts at this module instead
(``python -m ffjobs.data.worker_process FD``) and receives its target over its pipe.

A worker's standard error goes to a file of its own, so that a worker that ends early is
reported with its own last words (a traceback's last line) rather than a guess. A worker ends
with the process that started it, whatever ended that (:mod:`ffjobs.process_tree`): start it
from a thread that outlives it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from ffjobs.process_tree import die_with_parent

LAST_WORDS_BYTES = 4096
"""How much of a worker's standard error is read back for its last line."""
LAST_WORDS_CHARS = 400
"""A last line longer than this is cut: one line of an error message, not a dump."""

SIGNAL_CAUSES = {
    signal.SIGKILL: "the out-of-memory killer sends it",
    signal.SIGSEGV: "a crash in native code, such as an image decoder",
    signal.SIGBUS: "a crash in native code, such as an image decoder",
    signal.SIGABRT: "a crash in native code, such as an image decoder",
}


def _fork_is_safe() -> bool:
    return sys.platform == "linux" and threading.active_count() == 1


class WorkerProcess:
    """A process running ``target(connection, *args)``; :attr:`connection` is this side's end
    of their duplex pipe. ``target`` must be a module-level function of an importable module."""

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...], name: str):
        self.name = name
        self._stderr = tempfile.TemporaryFile(prefix="ffjobs-worker-")  # noqa: SIM115 - closed by close()
        self.connection, theirs = multiprocessing.Pipe()
        self._forked: BaseProcess | None = None
        self._fresh: subprocess.Popen | None = None
        try:
            if _fork_is_safe():  # milliseconds, and no thread's lock can be copied held
                self._forked = multiprocessing.get_context("fork").Process(
                    target=_run_forked,
                    args=(theirs, self._stderr.fileno(), os.getpid(), target, args),
                    name=name,
                    daemon=True,
                )
                self._forked.start()
            else:
                # a module entry point, not spawn: spawn re-runs our __main__ (in a task: airflow)
                self._fresh = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid())],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stderr=self._stderr,
                )
                self.connection.send((target, args))
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()

    @property
    def pid(self) -> int | None:
        process = self._forked or self._fresh
        return process.pid if process is not None else None

    @property
    def exitcode(self) -> int | None:
        """The exit status once it ended (negative: the signal that ended it), else ``None``."""
        if self._forked is not None:
            return self._forked.exitcode
        return self._fresh.poll() if self._fresh is not None else None

    def join(self, timeout: float | None = None) -> None:
        """Wait for the process to end (at most ``timeout`` seconds)."""
        if self._forked is not None:
            self._forked.join(timeout)
        elif self._fresh is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._fresh.wait(timeout)

    def terminate(self) -> None:
        """Ask the process to end now (SIGTERM)."""
        process = self._forked or self._fresh
        if process is not None and self.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()

    def how_it_ended(self) -> str:
        """In words: its exit status or signal, with its own last line of standard error when it
        wrote one (call once it ended: :meth:`join` first)."""
        code = self.exitcode
        if code is None:
            how = "is still running"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            cause = SIGNAL_CAUSES.get(-code)
            how = f"was killed by {name}" + (f" ({cause})" if cause else "")
        else:
            how = f"exited with code {code}"
        words = self.last_words()
        return f"{how}: {words}" if words else how

    def last_words(self) -> str | None:
        """The last non-empty line the process wrote to standard error, if any."""
        try:
            size = os.fstat(self._stderr.fileno()).st_size
            self._stderr.seek(max(0, size - LAST_WORDS_BYTES))
            tail = self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):  # closed already
            return None
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        if not lines:
            return None
        last = lines[-1]
        return last if len(last) <= LAST_WORDS_CHARS else last[: LAST_WORDS_CHARS - 3] + "..."

    def close(self) -> None:
        """Release the pipe and the standard error file (the process should have ended)."""
        self.connection.close()
        self._stderr.close()


def _run_forked(
    connection: Connection,
    stderr_fd: int,
    parent_pid: int,
    target: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    die_with_parent(parent_pid)
    os.dup2(stderr_fd, 2)  # native code writes there
    # sys.stderr may be the parent's replacement (a task's log, a test's capture), not fd 2
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
    target(connection, *args)


def _run_fresh(fd: int, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    connection = Connection(fd)
    target, args = connection.recv()
    target(connection, *args)


if __name__ == "__main__":
    _run_fresh(int(sys.argv[1]), int(sys.argv[2]))
