"""The embedded Airflow's launcher against a fake ``airflow`` command (``fake_airflow.py``): what
it starts and with what settings, that ``up`` reuses and ``down`` stops exactly what it
started (children included), and the modes of its secrets. ``tests/integration/
test_embedded_airflow.py`` runs the same launcher with the real Airflow."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ffjobs.airflow.embedded import COMPONENTS, USERNAME, EmbeddedAirflow, airflow_env
from ffjobs.errors import UserError
from ffjobs.process_tree import is_running

FAKE = Path(__file__).with_name("fake_airflow.py")


@pytest.fixture
def airflow(tmp_path: Path):
    command = tmp_path / "bin" / "airflow"
    command.parent.mkdir()
    command.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n"
    )
    command.chmod(0o755)
    lines: list[str] = []
    embedded = EmbeddedAirflow(tmp_path / "work", airflow=str(command), echo=lines.append)
    embedded.workdir.mkdir()
    embedded.lines = lines  # type: ignore[attr-defined]
    try:
        yield embedded
    finally:
        embedded.down()


def calls(airflow: EmbeddedAirflow) -> list[dict]:
    path = airflow.home / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


NOTED_S = 60
"""How long a fake component may take to note its call after ``up`` returned: ``up`` waits
until each component runs, not until its interpreter has reached its first line (a fraction
of a second, many times that on a loaded machine)."""


def noted_calls(airflow: EmbeddedAirflow, count: int) -> list[dict]:
    """The calls, once at least ``count`` are noted."""
    wait_for(lambda: len(calls(airflow)) >= count, timeout=NOTED_S)
    return calls(airflow)


def children(airflow: EmbeddedAirflow) -> list[int]:
    """The child each idle fake component started (a task's process, standing in)."""
    return [int((airflow.home / f"{c}.child").read_text()) for c in COMPONENTS[1:]]


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_up_starts_every_component_on_loopback_with_private_secrets(airflow):
    settings = airflow.up()
    assert sorted(airflow.running()) == sorted(COMPONENTS)
    made = noted_calls(airflow, 1 + len(COMPONENTS))
    assert made[0]["argv"] == ["db", "migrate"]  # before any component starts
    assert sorted(c["argv"][0] for c in made[1:]) == sorted(COMPONENTS)
    for call in made:
        env = call["env"]
        assert call["cwd"] == str(airflow.workdir)  # configs/ and runs/ resolve there
        assert env["AIRFLOW_HOME"] == str(airflow.home)
        assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
        assert env["AIRFLOW__API__PORT"] == str(settings.port)
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite:///")
        assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith("SimpleAuthManager")
    assert airflow.home == airflow.workdir / ".state" / "airflow"
    assert stat.S_IMODE(airflow.home.stat().st_mode) == 0o700
    for secret in ("passwords.json", "embedded.json"):
        assert stat.S_IMODE((airflow.home / secret).stat().st_mode) == 0o600
    password = json.loads((airflow.home / "passwords.json").read_text())[USERNAME]
    assert len(password) >= 16
    for component in COMPONENTS:  # each in a process group of its own, named in its pid file
        pid = json.loads(airflow.pid_file(component).read_text())["pid"]
        assert os.getpgid(pid) == pid
    assert airflow.client().token == "token"  # the kept password logs in


def test_task_processes_inherit_what_they_import_from_the_schedulers_forkserver(tmp_path):
    """Python's forkserver skips a preload module that fails to import without a word: one that
    no longer imports would only make every task slower."""
    env = airflow_env(
        tmp_path, port=1, worker_log_port=2, trigger_log_port=3, secret_key="k", jwt_secret="j"
    )
    assert env["AIRFLOW__SCHEDULER__MP_START_METHOD"] == "forkserver"
    preload = env["AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD"]
    probe = (
        "import gc, importlib, sys\n"
        "importlib.import_module(sys.argv[1])\n"
        "heavy = ('torch', 'mlflow.store.tracking.sqlalchemy_store', 'ffjobs.train.stage')\n"
        "assert all(name in sys.modules for name in heavy), heavy\n"
        "assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, preload], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_second_up_reuses_what_runs_and_down_stops_it_all(airflow):
    airflow.up()
    first = airflow.running()
    wait_for(lambda: all((airflow.home / f"{c}.child").exists() for c in COMPONENTS[1:]))
    below = children(airflow)
    secrets = (airflow.home / "embedded.json").read_text()
    airflow.up()
    assert airflow.running() == first
    assert len(calls(airflow)) == 1 + len(COMPONENTS)  # nothing started again
    assert "already running" in airflow.lines[-1] and "reused" in airflow.lines[-1]
    assert (airflow.home / "embedded.json").read_text() == secrets

    assert sorted(airflow.down()) == sorted(COMPONENTS)
    assert airflow.running() == {}
    assert not any(is_running(pid) for pid in [*first.values(), *below])
    assert not any(airflow.pid_file(c).exists() for c in COMPONENTS)
    assert airflow.down() == []  # nothing running: nothing to do, no error


def test_an_up_after_ffjobs_changed_starts_everything_again(airflow, monkeypatch):
    """The tasks run the ffjobs the scheduler loaded when it started: new source, new Airflow."""
    import ffjobs.airflow.embedded as embedded

    settings = airflow.up()
    first = airflow.running()
    noted_calls(airflow, 1 + len(COMPONENTS))  # each has run, not only been started
    monkeypatch.setattr(embedded, "source_digest", lambda: "changed since")
    again = airflow.up()
    assert "ffjobs changed since the embedded Airflow started: restarting it" in airflow.lines
    assert again.port == settings.port and airflow.running() != first
    assert not any(is_running(pid) for pid in first.values())
    started_twice = 2 * (1 + len(COMPONENTS))  # migrated and started again
    assert len(noted_calls(airflow, started_twice)) == started_twice
    airflow.up()  # the same source as at that start: reused
    assert "reused" in airflow.lines[-1]


def test_down_kills_what_ignores_sigterm_and_returns_when_it_is_gone(airflow, monkeypatch):
    import ffjobs.airflow.embedded as embedded

    monkeypatch.setenv("FAKE_AIRFLOW_STUBBORN", "1")
    monkeypatch.setattr(embedded, "STOP_GRACE_S", 1.0)
    airflow.up()
    wait_for(lambda: all((airflow.home / f"{c}.child").exists() for c in COMPONENTS[1:]))
    below = children(airflow)
    assert sorted(airflow.down()) == sorted(COMPONENTS)
    assert not any(is_running(pid) for pid in below)  # at once: no grace for the kernel


def test_up_after_down_keeps_port_password_and_secrets(airflow):
    settings = airflow.up()
    password = airflow.password()
    airflow.down()
    again = airflow.up()
    assert again == settings
    assert airflow.password() == password


def test_a_partly_running_airflow_is_stopped_and_started_whole(airflow):
    airflow.up()
    scheduler = airflow.running()["scheduler"]
    os.killpg(scheduler, 9)
    wait_for(lambda: "scheduler" not in airflow.running())
    survivors = airflow.running()
    airflow.up()
    assert any("partly running" in line for line in airflow.lines)
    now = airflow.running()
    assert sorted(now) == sorted(COMPONENTS)
    assert not any(is_running(pid) for pid in survivors.values())  # not left beside new ones


def test_a_pid_given_to_another_process_is_never_signalled(airflow, tmp_path):
    airflow.up()
    airflow.down()
    # a pid file left behind, naming this test's own process with another start time
    record = {"pid": os.getpid(), "start_time": 1}
    airflow.pid_file("scheduler").write_text(json.dumps(record))
    assert airflow.running() == {}
    assert airflow.down() == []  # and this process is still here to say so


def test_client_refuses_when_nothing_runs(airflow):
    with pytest.raises(UserError, match="ffjobs airflow up"):
        airflow.client()


def test_a_component_that_dies_while_starting_is_named_with_its_log(airflow, tmp_path):
    broken = tmp_path / "bin" / "airflow"
    broken.write_text("#!/bin/sh\n[ \"$1\" = db ] && exit 0\necho 'no such database' >&2\nexit 1\n")
    with pytest.raises(UserError, match="exited waiting for") as failure:
        airflow.up()
    assert "no such database" in str(failure.value)
    assert airflow.running() == {}
