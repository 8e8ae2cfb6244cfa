"""Per-test timing of a whole test run: copy to the checkout's root as ``conftest.py`` (a CI
clone only) and run the test command with ``FFJOBS_TIMING=<file>``. Each worker appends one JSON
line per test: worker, test id, start and end (epoch s), and the CPU seconds of the worker
itself and of the children it reaped during the test (servers a session fixture started are
counted when they are stopped). The controller's copy of each line has worker ``-``."""

import json
import os
import time

_started = {}


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = (time.time(), os.times())


def pytest_runtest_logfinish(nodeid, location):
    t0, c0 = _started.pop(nodeid)
    c1 = os.times()
    record = {
        "w": os.environ.get("PYTEST_XDIST_WORKER", "-"),
        "id": nodeid,
        "t0": t0,
        "t1": time.time(),
        "self": c1.user + c1.system - c0.user - c0.system,
        "kids": c1.children_user + c1.children_system - c0.children_user - c0.children_system,
    }
    with open(os.environ["FFJOBS_TIMING"], "a") as out:
        out.write(json.dumps(record) + "\n")
