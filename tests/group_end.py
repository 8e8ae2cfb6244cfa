"""Test groups (tests that share a stack component, or a fixture made once per module, run on
one worker, one at a time) and the session servers that stop once the last test needing them
has run.

Under ``--dist loadgroup`` a group's tests run on one worker one after the other (pytest-xdist
sends a group as one unit). A session server whose tests all belong to one group is therefore
not needed on that worker once its next test is of another group. An Airflow stack left to idle
until the session ends costs about a fifth of a core (scheduler, DAG processor, triggerer and
api-server polling): on two cores, for half an hour, time every other test loses. A server used
by tests of several groups lives to the end of the session, as it does without pytest-xdist.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

SHARED_GROUPS = {
    "local_stack": "mini-cluster",
    "stack_env": "mini-cluster",
    "airflow_api": "airflow",
    "airflow_stack": "airflow",
    "trained": "trained",
    "mlflow_server": "mlflow-server",
    "s3_endpoint": "s3-server",
}
"""Under pytest-xdist (``--dist loadgroup``), the tests that use one of these session fixtures
run on one worker, one at a time: the local stack's SLURM mini-cluster (three nodes that drills
cut, throttle and kill, and a preflight that needs all three), the session's Airflow, the
trained models of tests/evaluate and tests/registry (minutes of CPU each), the test MLflow
server, the S3 server: each is made once. The first that a test uses, in this order, names its
group."""

_sole_group: dict[str, str] = {}
"""Session fixture -> the one group whose tests use it (absent: tests of several groups do)."""
_stops: dict[str, Callable[[], None]] = {}
_stopped: set[str] = set()


def mark_groups(items: list[pytest.Item]) -> None:
    """Mark each test with its group, and note which servers serve one group only."""
    users: dict[str, set[str]] = {}
    for item in items:
        used = [name for name in SHARED_GROUPS if name in item.fixturenames]
        if used:
            group = SHARED_GROUPS[used[0]]
            item.add_marker(pytest.mark.xdist_group(group))
            for name in used:
                users.setdefault(name, set()).add(group)
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    _sole_group.update(
        {name: next(iter(groups)) for name, groups in users.items() if len(groups) == 1}
    )


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture made once per module: the module's tests then run on one
    worker, or each worker that gets one of them makes the fixture again (the float64 compile
    comparison's three trainings were made twice; dev/README.md has the figures)."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's own record of what the test uses
    if info is None:
        return False
    return any(
        defs and defs[-1].scope == "module"
        for name, defs in info.name2fixturedefs.items()
        if name in item.fixturenames
    )


def stop_when_unused(fixture: str, stop: Callable[[], None]) -> None:
    """Call ``stop`` once this worker has run the last test that uses ``fixture`` (it must be
    safe to call again: the fixture's own teardown still runs at the end of the session)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and fixture in _sole_group:
        _stops[fixture] = stop


def before_test(item: pytest.Item) -> None:
    stopped = _stopped.intersection(item.fixturenames)
    if stopped:
        pytest.fail(f"{item.nodeid} needs {', '.join(sorted(stopped))}, stopped after the last "
                    "test of its group: that group's tests were not run together")  # fmt: skip


def after_test(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    group = _group(item)
    if group is None or nextitem is None or _group(nextitem) == group:
        return  # mid-group, or the session's last test: the fixtures' own teardown stops them
    for fixture in [f for f in _stops if _sole_group[f] == group]:
        _stops.pop(fixture)()
        _stopped.add(fixture)


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark and mark.args else None
