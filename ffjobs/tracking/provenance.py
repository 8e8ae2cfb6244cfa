"""Where a registered model came from: the code's commit and the Airflow DAG run, if any."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

UNKNOWN = "unknown"


def code_commit() -> str:
    """The commit of the ffjobs code that is running (``<sha>-dirty`` with uncommitted
    changes), or ``unknown`` when the package is not in a git checkout (an installed wheel)."""
    package = Path(__file__).resolve().parents[1]
    found = _git(package, "rev-parse", "--show-toplevel", "HEAD")
    if found is None or len(lines := found.stdout.split()) != 2:
        return UNKNOWN
    top, sha = Path(lines[0]), lines[1]
    if package.parent != top.resolve():  # a wheel inside some other repository's venv
        return UNKNOWN
    changed = _git(top, "diff", "--quiet", "HEAD")
    return f"{sha}-dirty" if changed is not None and changed.returncode == 1 else sha


def _git(where: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result if result.returncode in (0, 1) else None


def airflow_dag_run(record: dict[str, Any]) -> dict[str, str]:
    """``{"dag_id", "run_id", "url"}`` of the Airflow DAG run behind the run, or ``{}``: this
    task's (Airflow's ``AIRFLOW_CTX_*`` variables), else the one the run was created in.
    ``url``: its page in the Airflow UI, when the UI's address (``[api] base_url``) is known."""
    from ffjobs.tracking.mlflow_logger import environment_tags

    tags = {**(record.get("tags") or {}), **environment_tags()}
    if not tags.get("airflow.run_id"):
        return {}
    found = {"dag_id": tags.get("airflow.dag_id", UNKNOWN), "run_id": tags["airflow.run_id"]}
    base = airflow_base_url()
    if base:
        found["url"] = f"{base}/dags/{quote(found['dag_id'])}/runs/{quote(found['run_id'])}"
    return found


def airflow_base_url() -> str | None:
    """The Airflow UI's address (``AIRFLOW__API__BASE_URL``, set where Airflow runs), or None."""
    base = os.environ.get("AIRFLOW__API__BASE_URL", "").rstrip("/")
    return base if base.startswith(("http://", "https://")) else None
