"""The embedded Airflow: the product's own Airflow on this machine, for the demo and for trying
the DAG without a deployment.

Its state lives in the working folder's ``.state/airflow/`` (``AIRFLOW_HOME``): a SQLite
metadata database, the components' logs (``<component>.log``) and pid files, the settings
(``embedded.json``: port, secrets; 0600) and the login (``passwords.json``: the simple auth
manager's user ``admin`` and a generated password; 0600). The components (``api-server``,
``dag-processor``, ``scheduler``, ``triggerer``) run as background processes, each in its own
process group, with the LocalExecutor, this package's ``dags/`` and the api-server bound to
127.0.0.1. They run from the working folder, where ``configs/`` and the DAG's ``runs/`` resolve.

:meth:`EmbeddedAirflow.up` reuses components that are running and healthy (and restarts them
when ffjobs' source changed since they started: the tasks run what the scheduler loaded,
:mod:`ffjobs.airflow.task_imports`); :meth:`down` stops
exactly the processes its pid files name (each one checked by its start time, so a pid the
system gave to another process since is left alone), their whole process groups.

:func:`airflow_env` is the one description of such an Airflow's environment: the integration
tests' Airflow (``tests/integration/airflow_stack.py``) is built from it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ffjobs.airflow.loaded_code import source_digest
from ffjobs.errors import UserError
from ffjobs.private_files import make_private_dir, write_private_text
from ffjobs.process_tree import is_running, process_start_time

COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")
USERNAME = "admin"
DAG_ID = "ffjobs_pipeline"
STATE_DIR = Path(".state") / "airflow"
"""``AIRFLOW_HOME`` of the embedded Airflow, under the working folder."""
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
# Starting takes 20-60 s on a quiet two-core machine (each component imports Airflow, the
# api-server its whole app); five minutes leaves room for a loaded one.
START_TIMEOUT_S = 300.0
# Each component's own shutdown (the scheduler's waits for its task processes) gets this long
# after SIGTERM before its process group is killed.
STOP_GRACE_S = 30.0
KILL_WAIT_S = 10.0
"""How long :meth:`EmbeddedAirflow.down` waits for what it SIGKILLed to be gone."""
SIMPLE_AUTH_MANAGER = (
    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
)


def airflow_env(
    home: Path,
    *,
    port: int,
    worker_log_port: int,
    trigger_log_port: int,
    secret_key: str,
    jwt_secret: str,
    dags_folder: Path = DAGS_FOLDER,
) -> dict[str, str]:
    """The environment of an Airflow in ``home`` on 127.0.0.1:``port``: SQLite, LocalExecutor,
    the simple auth manager (user ``admin``, password in ``home/passwords.json``), no examples."""
    url = f"http://127.0.0.1:{port}"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # a DAG run here runs one task at a time; 32 idle worker processes cost memory
        "AIRFLOW__CORE__PARALLELISM": "4",
        # the LocalExecutor's workers forked from a process that imported what tasks import:
        # each task, a fork of a worker, inherits it (ffjobs.airflow.task_imports)
        "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
        "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD": "ffjobs.airflow.task_imports",
        "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file(home)),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": secret_key,
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,
        # the default ports are shared by every Airflow on the machine
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
    }


def passwords_file(home: Path) -> Path:
    return home / "passwords.json"


def free_port(preferred: int | None = None) -> int:
    """``preferred`` if nothing listens there on loopback, else a free port."""
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as probe:
            # as servers bind: a port whose last connections linger in TIME_WAIT is free
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError("no free loopback port")  # pragma: no cover - bind to port 0 does not fail


@dataclass
class Settings:
    """What one embedded Airflow keeps across ``up``s (``embedded.json``, 0600)."""

    port: int
    worker_log_port: int
    trigger_log_port: int
    secret_key: str
    jwt_secret: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class EmbeddedAirflow:
    """The embedded Airflow of ``workdir`` (its home: ``workdir/.state/airflow``).

    ``airflow``: the ``airflow`` command (default: the one beside this Python); ``echo``:
    where progress lines go."""

    def __init__(
        self,
        workdir: Path,
        *,
        airflow: str | None = None,
        echo: Callable[[str], None] = print,
        start_timeout_s: float = START_TIMEOUT_S,
    ):
        self.workdir = Path(workdir).resolve()
        self.home = self.workdir / STATE_DIR
        self.airflow = airflow or str(Path(sys.executable).parent / "airflow")
        self.echo = echo
        self.start_timeout_s = start_timeout_s

    # ------------------------------------------------------------------ state files

    @property
    def settings_file(self) -> Path:
        return self.home / "embedded.json"

    def pid_file(self, component: str) -> Path:
        return self.home / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.home / f"{component}.log"

    def settings(self) -> Settings | None:
        """The kept settings (None before the first ``up``)."""
        if not self.settings_file.exists():
            return None
        try:
            return Settings(**json.loads(self.settings_file.read_text()))
        except (ValueError, TypeError) as exc:
            raise UserError(
                f"{self.settings_file}: not the embedded Airflow's settings ({exc}); "
                f"run `ffjobs airflow down`, delete {self.home} and start again"
            ) from None

    def password(self) -> str:
        path = passwords_file(self.home)
        try:
            return str(json.loads(path.read_text())[USERNAME])
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(
                f"{path}: no password for {USERNAME} ({exc}); start it with `ffjobs airflow up`"
            ) from None

    def env(self, settings: Settings) -> dict[str, str]:
        return {**os.environ, **airflow_env(self.home, **asdict(settings))}

    # ------------------------------------------------------------------ life cycle

    def running(self) -> dict[str, int]:
        """The components whose recorded process is alive: name -> pid."""
        alive = {}
        for component in COMPONENTS:
            recorded = self._recorded(component)
            if recorded and is_running(recorded["pid"], recorded.get("start_time")):
                alive[component] = recorded["pid"]
        return alive

    def up(self, port: int | None = None) -> Settings:
        """Start the components (or reuse them when all run and the api-server answers), wait
        until the api-server is healthy and the DAG parsed, and unpause the DAG."""
        settings = self.settings()
        running = self.running()
        if running and self._code_changed():
            self.echo("ffjobs changed since the embedded Airflow started: restarting it")
            self.down()
            running = {}
        if settings and len(running) == len(COMPONENTS) and self._healthy(settings):
            if port not in (None, settings.port):
                raise UserError(
                    f"the embedded Airflow already runs on port {settings.port}; "
                    f"`ffjobs airflow down` first to move it to {port}"
                )
            self.echo(f"Airflow already running at {settings.url} (reused)")
            return settings
        if running:
            self.echo(f"Airflow partly running ({', '.join(running)}): stopping it first")
            self.down()
        settings = self._new_settings(settings, port)
        self._start(settings)
        return settings

    def down(self) -> list[str]:
        """Stop the components this home started and every process below them (a task runs in
        a process group of its own): SIGTERM to the components' groups and to each process
        below them, SIGKILL after :data:`STOP_GRACE_S` to whatever of them is left; it returns
        once all of it is gone (at most :data:`KILL_WAIT_S` more). Returns the components
        stopped; none running is no error."""
        running = self.running()
        below = descendants(running.values())  # before they go: their parents are the map
        for pid in running.values():
            _signal_group(pid, signal.SIGTERM)
        _signal_each(below, signal.SIGTERM)  # a task's own group: its supervisor may not pass it on

        def left() -> bool:
            return any(group_members(pid) for pid in running.values()) or any(
                is_running(pid, start) for pid, start in below.items()
            )

        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and left():
            time.sleep(0.2)
        for pid in running.values():
            _signal_group(pid, signal.SIGKILL)
        _signal_each(below, signal.SIGKILL)
        # a killed process is gone only once the kernel has taken its memory back (a task
        # worker holds torch's): return when nothing stopped here runs any more
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and left():
            time.sleep(0.05)
        for component in COMPONENTS:
            with contextlib.suppress(FileNotFoundError):
                self.pid_file(component).unlink()
        return list(running)

    def _new_settings(self, kept: Settings | None, port: int | None) -> Settings:
        wanted = port or (kept.port if kept else None)
        chosen = free_port(wanted)
        if port and chosen != port:
            raise UserError(f"port {port} on 127.0.0.1 is in use; pick another with --port")
        if wanted and chosen != wanted:
            self.echo(f"port {wanted} is in use now: Airflow moves to {chosen}")
        settings = Settings(
            port=chosen,
            worker_log_port=free_port(kept.worker_log_port if kept else None),
            trigger_log_port=free_port(kept.trigger_log_port if kept else None),
            secret_key=kept.secret_key if kept else secrets.token_urlsafe(24),
            jwt_secret=kept.jwt_secret if kept else secrets.token_urlsafe(24),
        )
        make_private_dir(self.home)
        write_private_text(self.settings_file, json.dumps(asdict(settings), indent=2))
        if not passwords_file(self.home).exists():
            password = {USERNAME: secrets.token_urlsafe(16)}
            write_private_text(passwords_file(self.home), json.dumps(password))
        return settings

    def _start(self, settings: Settings) -> None:
        env = self.env(settings)
        code = source_digest()
        self.echo(f"starting Airflow in {self.home} (logs there)")
        migrate = subprocess.run(
            [self.airflow, "db", "migrate"],
            env=env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=self.start_timeout_s,
            check=False,
        )
        if migrate.returncode != 0:
            raise UserError(
                f"airflow db migrate failed (exit {migrate.returncode}):\n"
                + (migrate.stdout + migrate.stderr)[-2000:]
            )
        for component in COMPONENTS:
            with self.log_file(component).open("a") as log:
                process = subprocess.Popen(
                    [self.airflow, component],
                    env=env,
                    cwd=self.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: down() ends its children
                )
            record = {
                "pid": process.pid,
                "start_time": process_start_time(process.pid),
                "code": code,  # the ffjobs its tasks inherit (ffjobs.airflow.task_imports)
            }
            write_private_text(self.pid_file(component), json.dumps(record))
        deadline = time.monotonic() + self.start_timeout_s
        self._wait("the api-server to answer", deadline, lambda: self._healthy(settings))
        client = self.client(settings)
        path = f"/api/v2/dags/{DAG_ID}"
        self._wait(f"DAG {DAG_ID} to be parsed", deadline, lambda: client.get(path)[0] == 200)
        status, body = client.request("PATCH", path, {"is_paused": False})
        if status != 200:
            raise UserError(f"could not unpause {DAG_ID}: HTTP {status} {body}")
        self.echo(f"Airflow running at {settings.url}")

    def _code_changed(self) -> bool:
        """The scheduler hands its tasks the ffjobs it loaded when it started: another now?"""
        recorded = self._recorded("scheduler") or {}
        return recorded.get("code") != source_digest()

    def _wait(self, what: str, deadline: float, ready: Callable[[], bool]) -> None:
        while not ready():
            gone = [c for c in COMPONENTS if c not in self.running()]
            if gone:
                tail = self.log_file(gone[0]).read_text(errors="replace")[-3000:]
                self.down()
                raise UserError(f"airflow {gone[0]} exited waiting for {what}:\n{tail}")
            if time.monotonic() > deadline:
                self.down()
                raise UserError(f"timed out waiting for {what}; logs in {self.home}")
            time.sleep(1)

    def _healthy(self, settings: Settings) -> bool:
        try:
            status, _ = AirflowClient(settings.url).get("/api/v2/monitor/health")
        except OSError:
            return False
        return status == 200

    def _recorded(self, component: str) -> dict[str, Any] | None:
        try:
            recorded = json.loads(self.pid_file(component).read_text())
        except (OSError, ValueError):
            return None
        return recorded if isinstance(recorded, dict) and "pid" in recorded else None

    # ------------------------------------------------------------------ REST

    def client(self, settings: Settings | None = None) -> AirflowClient:
        """A logged-in REST client of the running Airflow."""
        settings = settings or self.settings()
        if settings is None or not self.running():
            raise UserError(
                "the embedded Airflow is not running: start it with `ffjobs airflow up`"
            )
        client = AirflowClient(settings.url)
        client.login(USERNAME, self.password())
        return client


class AirflowClient:
    """A small JSON client of Airflow's REST API v2 (standard library only)."""

    def __init__(self, url: str):
        self.url = url
        self.token: str | None = None

    def login(self, username: str, password: str) -> None:
        body = {"username": username, "password": password}
        status, answer = self.request("POST", "/auth/token", body)
        if status not in (200, 201):
            raise UserError(f"login to {self.url} as {username} refused: HTTP {status}")
        self.token = answer["access_token"]

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; ``(status, decoded body)`` for every status (no raise)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - loopback
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def expect(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded body of a request that must succeed; else a one-line error."""
        status, answer = self.request(method, path, body)
        if status not in (200, 201):
            raise UserError(f"Airflow refused {method} {path}: HTTP {status} {answer}")
        return answer


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # it ended meanwhile
        os.killpg(pgid, sig)


def _signal_each(processes: dict[int, int | None], sig: signal.Signals) -> None:
    """Signal each of ``processes`` (pid -> start time) that is still the process it was."""
    for pid, start in processes.items():
        if is_running(pid, start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgid, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies are over) of process group ``pgid``."""
    members = []
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(pid)
    return members


def descendants(roots) -> dict[int, int | None]:
    """Every live process below ``roots`` (pids), with its start time."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(pid)
    found: dict[int, int | None] = {}
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = process_start_time(child)
                todo.append(child)
    return found
