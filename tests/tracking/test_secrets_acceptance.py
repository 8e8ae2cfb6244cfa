"""A real pipeline (``ffjobs run``, every stage, a real MLflow server) with secrets in the
tracking URI, the S3 endpoint, ``slurm.setup``, ``slurm.env`` and the environment: none of them
is in the server's store (database, artifacts, log) or on the terminal; the run directory is
its owner's only.

The MLflow client talks through ``http://user:password@host`` (the userinfo becomes a basic
auth header, which a server without auth ignores), so the tracking URI carries a real password
the whole way.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from train.helpers import place_local_encoders

REPO = Path(__file__).resolve().parents[2]
PIPELINE_S = 600
"""The whole pipeline with the evaluation encoder given: under a minute on a quiet 2-core
machine, 10 times that for a loaded one."""
SHOW_S = 120
"""``ffjobs runs show``: an import and a few small files, seconds."""
SECRETS = [f"S3CRETPW{i}" for i in range(1, 8)]
TINY = [
    "train.steps=4",
    "train.checkpoint_every=2",
    "train.log_every=2",
    "train.batch_size=4",
    "model.identity_weights=null",
    "evaluate.gate.min_ssim=0",  # 4 steps cannot pass the quality floor; the wiring is checked
    "evaluate.gate.min_identity_top1=0",
    "tracking.system_metrics_interval_s=0",
]


def secret_overrides(tracking_host: str) -> list[str]:
    """``--set`` lines placing S3CRETPW1..4 in the config, each the way a user would."""
    host = tracking_host.removeprefix("http://")
    return [
        f"tracking.tracking_uri=http://user:S3CRETPW1@{host}",
        "s3.endpoint_url=http://key:S3CRETPW2@127.0.0.1:9",  # never called: the data is local
        'slurm.setup=["module load cuda", "export AWS_SECRET_ACCESS_KEY=S3CRETPW3"]',
        'slurm.env={"MY_TOKEN": "S3CRETPW4", "NCCL_DEBUG": "WARN"}',
    ]


def secret_environment() -> dict[str, str]:
    """S3CRETPW5..7 in the environment, as a CI job or a login shell has them."""
    return {
        **os.environ,
        "MLFLOW_TRACKING_USERNAME": "user",
        "MLFLOW_TRACKING_PASSWORD": "S3CRETPW5",
        "AWS_SECRET_ACCESS_KEY": "S3CRETPW6",
        "DATABASE_URL": "postgresql+psycopg://ffjobs:S3CRETPW7@db:5432/ffjobs",
    }


def leaks(where: Path) -> dict[str, list[str]]:
    """Every file under ``where`` holding a secret's bytes: {file: [secrets]}."""
    found = {}
    for path in sorted(p for p in where.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [secret for secret in SECRETS if secret.encode() in data]
        if hits:
            found[str(path)] = hits
    return found


@pytest.mark.slow  # the whole pipeline: validate, preflight, train, evaluate, register
@pytest.mark.timeout(PIPELINE_S + 2 * SHOW_S + 90 + 60)  # + the server's start, the checks
def test_no_secret_reaches_mlflow_or_the_terminal(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    sets = [f"--set={line}" for line in [*TINY, *secret_overrides(mlflow_server.uri)]]
    env = secret_environment()

    def ffjobs(*args: str, timeout: float = SHOW_S) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "ffjobs.cli", *args]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )

    config = ["--config", str(REPO / "configs/local.yaml")]
    place_local_encoders(tmp_path)
    run = ffjobs("run", *config, *sets, "--set=tracking.experiment=secrets", timeout=PIPELINE_S)
    assert run.returncode == 0, run.stderr[-4000:]
    key = run.stdout.split("run ", 1)[1].split(":", 1)[0]
    show = ffjobs("runs", "show", key, *config, *sets)
    shown = ffjobs("runs", "show", key, "--json", *config, *sets)
    assert show.returncode == shown.returncode == 0, show.stderr[-2000:]

    terminal = "\n".join(p.stdout + p.stderr for p in (run, show, shown))
    assert [secret for secret in SECRETS if secret in terminal] == [], terminal[-4000:]
    redacted_uri = mlflow_server.uri.replace("http://", "http://user:***@")
    assert f"MLflow {redacted_uri}/#/experiments/" in terminal  # the link is there, redacted
    assert json.loads(shown.stdout)["mlflow"].startswith(redacted_uri)

    client = MlflowClient(mlflow_server.uri)
    run_id = json.loads(shown.stdout)["mlflow_run_id"]
    params = client.get_run(run_id).data.params
    assert params["tracking.tracking_uri"] == redacted_uri
    assert params["s3.endpoint_url"] == "http://key:***@127.0.0.1:9"
    assert "export AWS_SECRET_ACCESS_KEY=***" in params["slurm.setup"]
    assert params["slurm.env.MY_TOKEN"] == "***" and params["slurm.env.NCCL_DEBUG"] == "WARN"
    assert client.list_artifacts(run_id), "the stages' reports were uploaded"
    # the server's whole store: sqlite database (and its journal), artifacts, its own log
    assert leaks(mlflow_server.root) == {}

    run_dir = tmp_path / "runs" / key
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "config.json").stat().st_mode) == 0o600
    assert "S3CRETPW4" in (run_dir / "config.json").read_text()  # the run's own copy is whole
