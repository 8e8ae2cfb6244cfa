"""A run's processes end with the command that started them, whatever ended that command.

Nothing tells a Linux process that its parent died: left alone, ``kill -9`` of ``ffjobs run``
leaves its training ranks running, and with them their loader workers, the checkpoint writer
and multiprocessing's resource tracker, for good. Here:

* **The parent-death signal** (:func:`die_with_parent`): a child asks the kernel, first thing,
  for SIGKILL when its parent ends (``prctl(PR_SET_PDEATHSIG)``), then checks that its parent
  is still the one that started it (it may have died before the request: then the child ends
  at once). The kernel sends it when the parent *thread* that started the child ends, so
  only children of a thread that outlives them ask: the parent of a launch's ranks (the
  launcher's thread waits for it) and the ranks (forks of that parent's one thread,
  :mod:`ffjobs.forked_ranks`), the DataLoader workers and the asynchronous checkpoint writer
  (started by the rank's training thread) and the data workers of
  :mod:`ffjobs.data.worker_process` (started by the thread that uses them).
* **A watchdog in each rank** (:func:`follow_launcher`): a thread that looks every
  :data:`WATCH_S` whether the launching command (its pid and start time, which the launcher
  puts in :data:`LAUNCHER_VAR`) is still there, and kills the rank if not. It reaches what the
  signal does not: a rank whose parent is not the launcher itself (a wrapper such as
  ``numactl`` in between).
* **What neither reaches ends by itself** once the processes above are gone: multiprocessing's
  resource tracker exits when the last process holding its pipe (the rank, its loader
  workers, the writer) has ended. Tracking's shippers and samplers are threads of the rank.

A killed rank takes its children along: each has the parent-death signal. A write of the
checkpoint writer in flight is cut off; it leaves at most a hidden temporary file, and the
previous verified checkpoint stands.

Also here, for telling whether a recorded process is still the one that was recorded (a run's
owner, :mod:`ffjobs.runs.owner`): :func:`process_start_time`, :func:`boot_id`.

Standard library only (the launcher imports it without torch). Elsewhere than Linux, the
parent-death signal and the start times are not available: the calls are no-ops there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

LAUNCHER_VAR = "FFJOBS_LAUNCHER"
"""Set by the local launcher in every rank's environment: ``<pid>:<start time>`` of the
launching process. Every process of the run inherits it, so it also marks them."""
WATCH_S = 0.5
"""How often a rank's watchdog looks for its launcher."""
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent, ``parent_pid`` (the process
    that started this one), ends; if it ended already, end now. A process that another one
    started on its behalf (a fork server) is left alone while ``parent_pid`` lives."""
    if not sys.platform.startswith("linux"):
        return
    if os.getppid() != parent_pid:
        if not is_running(parent_pid):
            os.kill(os.getpid(), sig)
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:  # it ended before the request
        os.kill(os.getpid(), sig)


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``); ``None``
    if there is no such process here. With the pid, it names one process of one boot."""
    stat = _stat(pid)
    return stat[1] if stat is not None else None


def boot_id() -> str | None:
    """This boot of this machine (``/proc/sys/kernel/random/boot_id``), or ``None``."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def is_running(pid: int, start_time: int | None = None) -> bool:
    """Whether process ``pid`` is alive here (a zombie is not) and, when ``start_time`` is
    given, is the process that started then, not a later one that got the same pid."""
    if Path("/proc/self/stat").exists():
        stat = _stat(pid)
        return stat is not None and stat[0] != "Z" and start_time in (None, stat[1])
    try:  # no /proc: whether the pid exists is all there is to know
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    return True


def _stat(pid: int) -> tuple[str, int] | None:
    """The state letter and start time of process ``pid``, from ``/proc/<pid>/stat``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold anything: split after it
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])  # fields 3 (state) and 22 (start time)


def launcher_environment() -> dict[str, str]:
    """The variable the launcher adds to each rank's environment: this process, the launcher."""
    pid = os.getpid()
    return {LAUNCHER_VAR: f"{pid}:{process_start_time(pid) or ''}"}


def follow_launcher(environ: Mapping[str, str] | None = None) -> None:
    """In a rank the local launcher started: end with the launcher, by the parent-death signal
    when the launcher is this process's parent, and by a watchdog thread in any case. A no-op
    in a process no local launcher started (torchrun, SLURM)."""
    value = (os.environ if environ is None else environ).get(LAUNCHER_VAR)
    if not value:
        return
    pid_text, _, start_text = value.partition(":")
    pid, start = int(pid_text), int(start_text) if start_text else None
    die_with_parent(pid)  # when a wrapper started this rank, the watchdog alone follows
    threading.Thread(
        target=_watch_launcher, args=(pid, start), name="ffjobs-launcher-watch", daemon=True
    ).start()


def _watch_launcher(pid: int, start: int | None) -> None:
    while is_running(pid, start):
        time.sleep(WATCH_S)
    # the launcher is gone: nobody reads this rank's output or waits for it any more; its
    # children end by their own parent-death signal
    os.kill(os.getpid(), signal.SIGKILL)
