"""A real Airflow 3 for integration tests: its components as subprocesses on loopback.

:class:`AirflowStack` migrates a SQLite metadata database in a temporary ``AIRFLOW_HOME``, then
starts the components it is asked for (``api-server``, ``dag-processor``, ``scheduler``,
``triggerer``), each ``airflow <component>`` in its own process group with its output in
``<home>/<component>.log``: LocalExecutor, the simple auth manager with a known user and
password, this repository's ``dags/``, no examples. It waits for the api-server's health and the
``ffjobs_pipeline`` DAG to be parsed, logs in through ``POST /auth/token`` and offers a small
JSON client (:meth:`get`, :meth:`post`, :meth:`patch`, :meth:`delete`).

Fixtures: ``airflow_api`` (api-server + dag-processor: enough to trigger and inspect DAG runs)
and ``airflow_stack`` (all four: DAG runs execute), registered in ``conftest.py`` so that each
starts once a session: a test names the one it needs, and never imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from group_end import stop_when_unused  # tests/ is on sys.path (rootdir conftest)

from ffjobs.airflow.embedded import USERNAME, AirflowClient, airflow_env
from ffjobs.local_ranks import free_loopback_port

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")
DAG_ID = "ffjobs_pipeline"
RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"
# Starting takes 20-60 s on a quiet two-core machine (each component imports Airflow and the
# api-server its whole app); five minutes leaves room for a loaded one.
START_TIMEOUT_S = 300.0
CACHE_CHECK_S = 1
"""How old the api-server's cached copy of a DAG may be before it is checked (see the env)."""
REPARSE_NEVER_S = 24 * 3600
# Given, so the evaluate task does not pre-train one (300 steps: most of the run's time on two
# busy cores, and in-process torch that starts no worker: nothing this test is about).
EVALUATION_ENCODER = "models/evaluation-encoder.pt"


class AirflowStack:
    """Airflow components in ``home``, run from ``workdir`` (where ``configs/`` and relative
    paths of the DAG's runs resolve)."""

    def __init__(
        self,
        home: Path,
        workdir: Path,
        components: Sequence[str] = COMPONENTS,
        extra_env: dict[str, str] | None = None,
    ):
        unknown = set(components) - set(COMPONENTS)
        assert not unknown, f"unknown Airflow components {sorted(unknown)}"
        self.home, self.workdir, self.components = home, workdir, tuple(components)
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(16)
        self.processes: dict[str, subprocess.Popen] = {}
        self.token: str | None = None
        self.env = {**os.environ, **self._airflow_env(), **(extra_env or {})}

    def _airflow_env(self) -> dict[str, str]:
        return {
            **airflow_env(
                self.home,
                port=self.port,
                worker_log_port=free_loopback_port(),
                trigger_log_port=free_loopback_port(),
                secret_key=secrets.token_urlsafe(24),
                jwt_secret=secrets.token_urlsafe(24),
                dags_folder=REPO / "dags",
            ),
            # the api-server serves its cached copy of a DAG version the dag-processor rewrote
            # in place (no DAG run since) until this many seconds passed (default 30): a trigger
            # right after a re-parse would be checked against the old Params
            "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": str(CACHE_CHECK_S),
            # no parse on a timer (default every 30 s): a test that changes what the DAG file
            # reads asks for its parse (reparse_dag), and a timed one mid-test is only noise
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(REPARSE_NEVER_S),
        }

    # ------------------------------------------------------------------ life cycle

    def start(self) -> AirflowStack:
        """Migrate the database, start the components, log in, wait for the DAG."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({USERNAME: self.password}))
        migrate = subprocess.run(
            [self._airflow(), "db", "migrate"],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
        assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
        for component in self.components:
            self._start(component, "w")
        deadline = time.monotonic() + START_TIMEOUT_S
        if "api-server" in self.components:
            self._wait("the api-server's health", deadline, self._healthy)
            self.token = self._login()
            if "dag-processor" in self.components:
                self._wait(f"DAG {DAG_ID} to be parsed", deadline, self._dag_parsed)
        return self

    def _start(self, component: str, mode: str) -> None:
        with self.log_path(component).open(mode) as log:
            self.processes[component] = subprocess.Popen(
                [self._airflow(), component],
                env=self.env,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends its children too
            )

    def stop(self) -> None:
        """End every component's process group: SIGTERM, then SIGKILL after 30 s."""
        _end_groups(list(self.processes.values()))
        self.processes.clear()

    def restart(self, component: str) -> None:
        """Stop ``component`` as a deployment's restart does (SIGTERM, its shutdown, SIGKILL
        after 30 s), then start it again; its log goes on in the same file."""
        _end_groups([self.processes.pop(component)])
        self._start(component, "a")

    def log_path(self, component: str) -> Path:
        return self.home / f"{component}.log"

    def all_logs(self) -> str:
        """The components' output and every file under ``<home>/logs`` (task and DAG-processor
        logs), for tests that check what Airflow wrote down."""
        paths = [self.log_path(c) for c in self.components]
        paths += sorted(p for p in (self.home / "logs").rglob("*") if p.is_file())
        return "\n".join(p.read_text(errors="replace") for p in paths if p.exists())

    def _airflow(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def _wait(self, what: str, deadline: float, ready) -> None:
        while not ready():
            for component, process in self.processes.items():
                if process.poll() is not None:
                    tail = self.log_path(component).read_text(errors="replace")[-3000:]
                    raise AssertionError(f"airflow {component} exited waiting for {what}:\n{tail}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; logs in {self.home}")
            time.sleep(1)

    def _healthy(self) -> bool:
        try:
            status, _ = self.request("GET", "/api/v2/monitor/health", auth=False)
        except OSError:
            return False
        return status == 200

    def _dag_parsed(self) -> bool:
        return self.get(f"/api/v2/dags/{DAG_ID}")[0] == 200

    def reparse_dag(self, ready: Callable[[dict], bool]) -> dict:
        """Ask the dag-processor to parse the DAG's file now (the form lists the working
        folder's ``configs/`` as the DAG is parsed); wait until ``ready(details)`` holds for
        ``GET /api/v2/dags/<dag>/details`` and return those details."""
        status, dag = self.get(f"/api/v2/dags/{DAG_ID}")
        assert status == 200, dag
        status, body = self.request("PUT", f"/api/v2/parseDagFile/{dag['file_token']}")
        assert status in (200, 201), body
        details: dict = {}

        def parsed() -> bool:
            nonlocal details
            details = self.get(f"/api/v2/dags/{DAG_ID}/details")[1]
            return ready(details)

        # a parse takes about a second; the dag-processor takes requests up between its loops
        self._wait(f"DAG {DAG_ID} to be parsed again", time.monotonic() + START_TIMEOUT_S, parsed)
        time.sleep(CACHE_CHECK_S + 1)  # the api-server's cached copy is checked again by then
        return details

    def _login(self) -> str:
        client = AirflowClient(self.url)
        client.login(USERNAME, self.password)
        return client.token

    # ------------------------------------------------------------------ REST client

    def request(
        self, method: str, path: str, body: Any = None, *, auth: bool = True
    ) -> tuple[int, Any]:
        """One JSON request (the product's client, :class:`AirflowClient`); returns
        ``(status, decoded body)`` for every status (no raise)."""
        client = AirflowClient(self.url)
        client.token = self.token if auth else None
        return client.request(method, path, body)

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any) -> tuple[int, Any]:
        return self.request("PATCH", path, body)

    def delete(self, path: str) -> tuple[int, Any]:
        return self.request("DELETE", path)


# ------------------------------------------------------------------ DAG runs

# Each task starts an interpreter that imports Airflow and ffjobs, training starts its ranks,
# evaluate and register load the model: minutes on two busy cores; this bounds a hang.
DAG_RUN_TIMEOUT_S = 1500


def trigger_dag_run(stack: AirflowStack, conf: dict[str, Any]) -> str:
    """Unpause the DAG and trigger a DAG run with ``conf``; its run id."""
    assert stack.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    status, body = stack.post(RUNS, {"logical_date": None, "conf": conf})
    assert status in (200, 201), body
    return body["dag_run_id"]


def task_instance(stack: AirflowStack, run_id: str, task_id: str) -> dict[str, Any]:
    status, body = stack.get(f"{RUNS}/{run_id}/taskInstances/{task_id}")
    assert status == 200, body
    return body


def task_states(stack: AirflowStack, run_id: str) -> dict[str, str | None]:
    status, body = stack.get(f"{RUNS}/{run_id}/taskInstances")
    assert status == 200, body
    return {ti["task_id"]: ti["state"] for ti in body["task_instances"]}


def dag_run_state(stack: AirflowStack, run_id: str) -> str:
    status, body = stack.get(f"{RUNS}/{run_id}")
    assert status == 200, body
    return body["state"]


def wait_for(stack: AirflowStack, run_id: str, done, what: str, timeout: float = DAG_RUN_TIMEOUT_S):
    """Poll the DAG run's task states until ``done(states)``; fail at once if the DAG run
    ended first."""
    deadline = time.monotonic() + timeout
    while True:
        states = task_states(stack, run_id)
        if done(states):
            return states
        state = dag_run_state(stack, run_id)
        if state in ("success", "failed") and not done(task_states(stack, run_id)):
            raise AssertionError(f"DAG run {run_id} ended {state} before {what}: {states}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {states}"
        time.sleep(2)


def wait_for_end(stack: AirflowStack, run_id: str, timeout: float = DAG_RUN_TIMEOUT_S) -> str:
    """The DAG run's final state, once it has one."""
    deadline = time.monotonic() + timeout
    while (state := dag_run_state(stack, run_id)) not in ("success", "failed"):
        assert time.monotonic() < deadline, f"DAG run {run_id} still {state}"
        time.sleep(2)
    return state


def task_log(stack: AirflowStack, run_id: str, task_id: str, try_number: int = 1) -> str:
    """A task try's log as the api-server serves it (the UI's view), one event a line."""
    status, body = stack.get(
        f"{RUNS}/{run_id}/taskInstances/{task_id}/logs/{try_number}?full_content=true"
    )
    if status != 200:
        return f"<no log: {status} {body}>"
    content = body.get("content", body) if isinstance(body, dict) else body
    if isinstance(content, list):
        return "\n".join(
            line.get("event", json.dumps(line)) if isinstance(line, dict) else str(line)
            for line in content
        )
    return str(content)


def xcom_value(stack: AirflowStack, run_id: str, task_id: str, key: str) -> Any:
    """One XCom of a task of the DAG run, decoded."""
    status, body = stack.get(f"{RUNS}/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
    assert status == 200, body
    value = body["value"]
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value  # a plain string


def write_evaluation_encoder(workdir: Path) -> None:
    """An untrained evaluation encoder of the preset's shape (the gate checks no identity
    metric here), where the conf's ``evaluate.identity_weights`` points."""
    import torch

    from ffjobs.config import load_config
    from ffjobs.models.identity import build_identity_backbone
    from ffjobs.quality.encoder import evaluation_identity_settings

    settings = evaluation_identity_settings(load_config("local"))
    path = workdir / EVALUATION_ENCODER
    path.parent.mkdir(parents=True)
    torch.save(build_identity_backbone(settings).state_dict(), path)


def _end_groups(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait(timeout=10)
        # a component that ended on SIGTERM can leave processes of its group behind (an idle
        # LocalExecutor worker, forked from the scheduler's forkserver, was seen to): none
        # outlives the stack
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(process.pid, sig)


def _stack(request: pytest.FixtureRequest, components: Sequence[str]) -> Iterator[AirflowStack]:
    root = request.getfixturevalue("tmp_path_factory").mktemp("airflow")
    stack = AirflowStack(root / "home", root / "work", components)
    stop_when_unused(request.fixturename, stack.stop)
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def airflow_api(request: pytest.FixtureRequest) -> Iterator[AirflowStack]:
    """The api-server and dag-processor: DAG runs can be triggered and read, none executes."""
    yield from _stack(request, ("api-server", "dag-processor"))


@pytest.fixture(scope="session")
def airflow_stack(request: pytest.FixtureRequest) -> Iterator[AirflowStack]:
    """All four components: triggered DAG runs execute (LocalExecutor) and can defer."""
    yield from _stack(request, COMPONENTS)
