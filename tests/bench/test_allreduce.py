"""The reference all-reduce loop runs and reports nccl-tests style figures (CPU, gloo)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_reference_loop_on_two_cpu_ranks():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ffjobs.bench.allreduce",
            "--sizes",
            "1,2",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["world_size"] == 2 and report["backend"] == "gloo"
    assert [r["size_bytes"] for r in report["results"]] == [2**20, 2 * 2**20]
    for row in report["results"]:
        # two ranks: busbw equals algbw, and algbw is bytes over time
        assert abs(row["busbw_gbps"] - row["algbw_gbps"]) < 1e-9
        assert abs(row["algbw_gbps"] - row["size_bytes"] / row["time_s"] / 1e9) < 1e-6


def test_bad_sizes_exit_2():
    result = subprocess.run(
        [sys.executable, "-m", "ffjobs.bench.allreduce", "--sizes", "x"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2 and "--sizes" in result.stderr
