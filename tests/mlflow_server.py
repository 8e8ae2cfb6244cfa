"""A real ``mlflow server`` of a test's own (sqlite store, proxied artifacts) on a free loopback
port, that a test can stop and start again on the same port and store: a tracking outage."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ffjobs.local_ranks import free_loopback_port


class MlflowServer:
    def __init__(self, root: Path, port: int | None = None):
        self.root = root
        self.port = port or free_loopback_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 90) -> MlflowServer:
        (self.root / "artifacts").mkdir(parents=True, exist_ok=True)
        mlflow = Path(sys.executable).parent / "mlflow"
        log = (self.root / "server.log").open("a")
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(
            [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--artifacts-destination", str(self.root / "artifacts"), "--serve-artifacts"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=1)  # noqa: S310 - loopback
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"mlflow server did not start on {self.uri}; see {log.name}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server and every worker it forked (the port is free afterwards)."""
        if self.process is None:
            return
        import signal

        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass
        self.process = None
