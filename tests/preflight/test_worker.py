"""Ranks on several (simulated) nodes: per-node and node-pair checks run and reach the report."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from ffjobs.local_ranks import free_loopback_port
from ffjobs.preflight.config import PreflightConfig
from ffjobs.preflight.report import build_report

REPO = Path(__file__).resolve().parents[2]


def test_group_checks_across_three_nodes(tmp_path):
    cfg = PreflightConfig(sizes_mib=[1.0], pair_size_mib=1.0, target_time_s=0.02, min_iters=2)
    (tmp_path / "job.json").write_text(
        json.dumps({"preflight": asdict(cfg), "backend": "gloo", "world_size": 4, "env": {}})
    )
    nodes = ["nodeA", "nodeA", "nodeB", "nodeC"]  # SLURMD_NODENAME names the node of a rank
    port = free_loopback_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_"))}
    procs = []
    for rank, node in enumerate(nodes):
        env = dict(
            base,
            RANK=str(rank),
            WORLD_SIZE="4",
            LOCAL_RANK=str(nodes[:rank].count(node)),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            SLURMD_NODENAME=node,
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "ffjobs.preflight.worker", str(tmp_path)], env=env, cwd=REPO
            )
        )
    assert [p.wait(timeout=180) for p in procs] == [0, 0, 0, 0]
    report = build_report(tmp_path, cfg, 4, "gloo")
    assert report["verdict"] == "PASS", report["reasons"]
    assert report["nodes"] == ["nodeA", "nodeB", "nodeC"]
    assert set(report["group_checks"]) == {
        "node:nodeA",
        "pair:nodeA+nodeB",
        "pair:nodeB+nodeC",
        "pair:nodeC+nodeA",
    }
    assert report["group_checks"]["pair:nodeA+nodeB"]["ranks"] == [0, 1, 2]
    assert all(row["busbw_gbps"] > 0 for row in report["group_checks"].values())
