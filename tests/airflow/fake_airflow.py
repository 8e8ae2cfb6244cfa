"""A stand-in for the ``airflow`` command at the subprocess boundary (tests of the embedded
Airflow's launcher): ``db migrate`` exits 0; ``api-server`` answers the few REST calls the
launcher makes on ``AIRFLOW__API__PORT``, with the password of the passwords file; the other
components idle, each with a child process, as a scheduler's task would. Every call is noted
in ``$AIRFLOW_HOME/calls.jsonl`` (argv, working folder, the Airflow settings it was given)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

HOME = Path(os.environ["AIRFLOW_HOME"])


class Api(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: object) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/api/v2/monitor/health":
            self._answer(200, {"metadatabase": {"status": "healthy"}})
        elif self.headers.get("Authorization") != "Bearer token":
            self._answer(401, {"detail": "not logged in"})
        else:
            self._answer(200 if self.path == "/api/v2/dags/ffjobs_pipeline" else 404, {})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        passwords = json.loads(Path(os.environ[PASSWORDS]).read_text())
        if passwords.get(body["username"]) == body["password"]:
            self._answer(201, {"access_token": "token"})
        else:
            self._answer(401, {"detail": "wrong password"})

    def do_PATCH(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        ok = self.headers.get("Authorization") == "Bearer token"
        self._answer(200 if ok else 401, {"is_paused": False})

    def log_message(self, *args: object) -> None:
        pass


PASSWORDS = "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"


def main() -> None:
    settings = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
    with (HOME / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": settings}) + "\n")
    if sys.argv[1:] == ["db", "migrate"]:
        return
    if sys.argv[1:] == ["api-server"]:
        HTTPServer(("127.0.0.1", int(os.environ["AIRFLOW__API__PORT"])), Api).serve_forever()
    # a task's process, or with FAKE_AIRFLOW_STUBBORN one that ignores SIGTERM (a supervisor
    # that passes the signal on to its task and waits for it)
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " * bool(
        os.environ.get("FAKE_AIRFLOW_STUBBORN")
    )
    child = subprocess.Popen([sys.executable, "-c", ignore + "import time; time.sleep(3600)"])
    (HOME / f"{sys.argv[1]}.child").write_text(str(child.pid))
    time.sleep(3600)


if __name__ == "__main__":
    main()
