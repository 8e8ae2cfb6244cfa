"""CPU time of every Python process of a test run, whoever started it (pytest's workers, the
CLI's ranks, Airflow's components and task processes, SLURM's jobs): copy into the CI clone's
virtualenv as ``.venv/lib/python3.X/site-packages/ffjobs_process_cpu.py``, with a
``ffjobs_process_cpu.pth`` beside it that holds the line ``import ffjobs_process_cpu`` (a
``.pth`` line runs at every interpreter's start; a ``sitecustomize.py`` there is shadowed by
Debian's own), and run the test command with ``FFJOBS_PROCESS_LOG=<file>`` (a folder every
process can write to). Each process that
exits through ``atexit`` or ``os._exit`` appends one JSON line: pid, parent, start and end
(epoch s), its own CPU seconds, its first arguments, which heavy packages it imported and the
test that was running when it (or its ancestor) started. Processes killed by a signal are
missing, and a forked child counts only what it used after the fork."""

import atexit
import json
import os
import resource
import sys
import time

_STARTED = time.time()
_HEAVY = ("torch", "torchvision", "airflow", "mlflow", "submitit", "ffjobs")


def _record() -> None:
    log = os.environ.get("FFJOBS_PROCESS_LOG")
    if not log:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "t0": _STARTED,
        "t1": time.time(),
        "cpu": usage.ru_utime + usage.ru_stime,
        "argv": sys.argv[:6],
        "mods": [name for name in _HEAVY if name in sys.modules],
        "test": os.environ.get("PYTEST_CURRENT_TEST", "")[:160],
    }
    try:
        with open(log, "a") as out:
            out.write(json.dumps(record) + "\n")
    except OSError:
        pass


atexit.register(_record)
_exit = os._exit


def _recorded_exit(code: int) -> None:
    _record()
    _exit(code)


os._exit = _recorded_exit
