"""The local stack (SLURM mini-cluster, MLflow server) for integration tests, and the session's
Airflow (``airflow_api``, ``airflow_stack``) and browsers on it (``airflow_page``,
``airflow_stack_page``).

``local_stack`` runs ``infra/local/up.sh`` (idempotent and quick when the stack is already up;
under ``make test`` the first test that needs the stack starts it), then exports the stack's
``env.sh`` (SLURM_CONF, MLFLOW_TRACKING_URI, FFJOBS_NODE_ADDRS, ...) into this process for the
whole session. Set ``FFJOBS_SKIP_STACK=1`` to skip the tests that need it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# One instance per session of each: a session fixture imported into several test modules would
# be one fixture per module, and start Airflow (about a minute of CI) once for each.
from airflow_stack import airflow_api, airflow_stack  # noqa: F401 - pytest fixtures
from browser import (  # noqa: F401 - pytest fixtures
    _airflow_api_browser,
    _airflow_stack_browser,
    airflow_page,
    airflow_stack_page,
)
from train.helpers import allow_more_time

REPO = Path(__file__).resolve().parents[2]
UP_SCRIPT = REPO / "infra" / "local" / "up.sh"
UP_LIMIT_S = 900
"""``up.sh``, the Debian packages' install included when one is in flight: under a minute on a
quiet machine once they are installed."""


def read_env_file(path: Path) -> dict[str, str]:
    """``export KEY=VALUE`` lines of a generated env file, values unquoted as the shell would."""
    env = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


@pytest.fixture(scope="session")
def local_stack() -> Iterator[dict[str, str]]:
    """Start (or find) the local stack; yield its environment, also set in ``os.environ``."""
    if os.environ.get("FFJOBS_SKIP_STACK") == "1":
        pytest.skip("FFJOBS_SKIP_STACK=1: local stack not wanted")
    # under make test the first caller starts the stack, after the package install in flight
    allow_more_time(UP_LIMIT_S)
    result = subprocess.run(
        ["bash", str(UP_SCRIPT)], capture_output=True, text=True, timeout=UP_LIMIT_S
    )
    assert result.returncode == 0, f"infra/local/up.sh failed:\n{result.stderr[-3000:]}"
    state_dir = Path(os.environ.get("FFJOBS_STATE_DIR", REPO / ".state" / "local-stack"))
    env = read_env_file(state_dir / "env.sh")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield env
