"""``ffjobs preflight --local`` end to end on this machine's CPU (gloo, two ranks)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_ib import make_port

REPO = Path(__file__).resolve().parents[2]
FAST = ["--set", "preflight.sizes_mib=[1, 4]", "--set", "preflight.target_time_s=0.05"]


def run_cli(tmp_path, *args, env=None):
    command = [
        sys.executable,
        "-m",
        "ffjobs.cli",
        "preflight",
        "--local",
        "--json",
        *FAST,
        "--set",
        f"runs_dir={tmp_path / 'runs'}",
        "--set",
        "tracking.enabled=false",
        *args,
    ]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_"))}
    full_env.update(env or {})
    return subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, env=full_env, timeout=240
    )


def test_local_cpu_preflight_passes_and_writes_artifacts(tmp_path):
    result = run_cli(tmp_path, "--set", 'preflight.min_busbw_gbps={"1": 0.001}')
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # exactly one JSON object
    assert report["verdict"] == "PASS", report["reasons"]
    assert report["backend"] == "gloo" and report["world_size"] == 2
    assert [row["size_bytes"] for row in report["sweep"]] == [2**20, 4 * 2**20]
    assert all(row["busbw_gbps"] > 0 and row["iters"] >= 3 for row in report["sweep"])
    for path in report["artifacts"].values():
        assert Path(path).is_file()


def test_missing_socket_interface_fails_before_collectives(tmp_path):
    result = run_cli(tmp_path, env={"NCCL_SOCKET_IFNAME": "doesnotexist0"})
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "FAIL" and report["stopped_before_collectives"]
    assert report["sweep"] == []
    assert report["reasons"][0].startswith("FAIL env")
    assert "NCCL_SOCKET_IFNAME=doesnotexist0 matches no network interface" in report["reasons"][0]


def test_ib_port_down_fails_naming_device_and_node(tmp_path):
    sysfs = tmp_path / "sys"
    make_port(sysfs, "mlx5_0")
    make_port(sysfs, "mlx5_1", state="1: DOWN", phys="3: Disabled")
    (sysfs / "class" / "net" / "lo").mkdir(parents=True)
    result = run_cli(
        tmp_path, "--sysfs-root", str(sysfs), "--set", "preflight.expected_ib_rate_gbps=400"
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    (reason,) = report["reasons"]
    assert "mlx5_1:1 is DOWN/Disabled" in reason
    assert report["suspect_nodes"] == report["nodes"] and report["nodes"][0] in reason


@pytest.mark.parametrize("args", [["--set", "preflight.sizes_mib=[]"], ["--nproc", "0"]])
def test_bad_input_exits_2_without_traceback(tmp_path, args):
    result = run_cli(tmp_path, *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
