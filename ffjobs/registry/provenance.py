"""Where a registered model came from: the code's commit and the Airflow DAG run, if any."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

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
    """``{"dag_id", "run_id"}`` of the Airflow DAG run behind the run, or ``{}``.

    Airflow sets ``AIRFLOW_CTX_*`` in a task's environment; a run created by the DAG also
    carries them in its record's tags (a later ``ffjobs run --resume`` has only those).
    """
    tags = record.get("tags") or {}
    run_id = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID") or tags.get("airflow.run_id")
    if not run_id:
        return {}
    dag_id = os.environ.get("AIRFLOW_CTX_DAG_ID") or tags.get("airflow.dag_id") or UNKNOWN
    return {"dag_id": dag_id, "run_id": run_id}
