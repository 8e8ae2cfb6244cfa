"""Parse the DAG folder in a subprocess with its own AIRFLOW_HOME, so Airflow's settings and
logging do not leak into other tests and ``sys.modules`` shows exactly what parsing imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def parse_dags(script: str, home: Path, cwd: Path = REPO) -> dict:
    """Run ``script`` (given the DAG folder as ``sys.argv[1]``) in ``cwd``, the deployment's
    working folder; return the JSON it printed last."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    result = subprocess.run(
        [sys.executable, "-c", script, str(REPO / "dags")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
