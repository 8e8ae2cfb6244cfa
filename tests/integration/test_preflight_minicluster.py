"""Preflight as a SLURM job across two nodes of the local mini-cluster (gloo on CPU)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "infra" / "local" / "up.sh"


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    """Environment that reaches the mini-cluster (SLURM_CONF, ...), after ``up.sh`` (idempotent)."""
    if not UP.exists():
        pytest.skip("infra/local/up.sh not found")
    result = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    state = Path(os.environ.get("FFJOBS_STATE_DIR", REPO / ".state" / "local-stack"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "SLURM_"))}
    for line in (state / "env.sh").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


def run_preflight(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "ffjobs.cli", "preflight", "-c", "minicluster", "--json",
        "--set", "preflight.sizes_mib=[1, 4]", "--set", "preflight.target_time_s=0.05",
        "--set", f"runs_dir={tmp_path}",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=600)  # fmt: skip


def test_preflight_job_passes_on_two_nodes(tmp_path, stack_env):
    result = run_preflight(tmp_path, stack_env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["verdict"] == "PASS", report["reasons"]
    assert report["mode"] == "slurm" and report["world_size"] == 2
    assert len(report["nodes"]) == 2 and all(n.startswith("node") for n in report["nodes"])
    assert [row["size_bytes"] for row in report["sweep"]] == [2**20, 4 * 2**20]


def test_missing_socket_interface_fails_before_collectives(tmp_path, stack_env):
    env = dict(stack_env, NCCL_SOCKET_IFNAME="doesnotexist0")
    result = run_preflight(tmp_path, env)
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["verdict"] == "FAIL" and report["stopped_before_collectives"]
    assert report["sweep"] == []
    first = report["reasons"][0]
    assert first.startswith("FAIL env [node") and "NCCL_SOCKET_IFNAME=doesnotexist0" in first
