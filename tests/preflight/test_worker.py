"""Ranks on several (simulated) nodes: per-node and node-pair checks run and reach the report."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from ffjobs.config.preflight import PreflightConfig
from ffjobs.local_ranks import free_loopback_port
from ffjobs.preflight.report import build_report
from ffjobs.preflight.worker import rank_file, run_rank

REPO = Path(__file__).resolve().parents[2]


def test_group_checks_across_three_nodes(tmp_path):
    # What is checked is that the group checks run and reach the report, not bandwidth: the four
    # ranks share the machine's cores, nodeA's pairs run three processes and B+C's two, and
    # loopback gloo bandwidth on an oversubscribed CPU varies several-fold (0.1 vs 0.7 GB/s seen
    # under load). Only a pair 20x slower than the best is a suspect here.
    cfg = PreflightConfig(
        sizes_mib=[1.0], pair_size_mib=1.0, target_time_s=0.02, min_iters=2, suspect_ratio=0.05
    )
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


def _one_rank_job(tmp_path, monkeypatch, backend: str) -> PreflightConfig:
    """A one-rank job in ``tmp_path`` and this process's environment set up as its rank."""
    cfg = PreflightConfig(sizes_mib=[1.0], target_time_s=0.02, min_iters=2, probe_topology=False)
    job = {"preflight": asdict(cfg), "backend": backend, "world_size": 1, "env": {}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    for name in [k for k in os.environ if k.startswith(("NCCL_", "GLOO_"))]:
        monkeypatch.delenv(name)
    # registered first so the variables the rank sets are removed again afterwards
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE",
                 "TORCH_NCCL_ASYNC_ERROR_HANDLING"):  # fmt: skip
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    port = str(free_loopback_port())
    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=port).items():  # fmt: skip
        monkeypatch.setenv(name, value)
    return cfg


def test_rank_joins_through_training_rendezvous_and_group(tmp_path, monkeypatch):
    from ffjobs.train import distributed

    cfg = _one_rank_job(tmp_path, monkeypatch, "gloo")
    calls = []
    real_join = distributed.join_process_group

    def spy(store, env, backend, device, collective_timeout_s):
        calls.append((env.rank, env.world_size, backend, collective_timeout_s))
        real_join(store, env, backend, device, collective_timeout_s)

    monkeypatch.setattr(distributed, "join_process_group", spy)
    assert run_rank(tmp_path) == 0
    record = json.loads(rank_file(tmp_path, 0).read_text())
    assert record["status"] == "ok", record.get("error")
    assert calls == [(0, 1, "gloo", cfg.timeout_s)]
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # set by the shared join


def test_rank_without_gpus_reports_the_backend_error(tmp_path, monkeypatch):
    import torch

    _one_rank_job(tmp_path, monkeypatch, "nccl")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert run_rank(tmp_path) == 1
    record = json.loads(rank_file(tmp_path, 0).read_text())
    assert record["status"] == "error"
    assert record["error"].startswith("UserError: preflight.backend: nccl needs GPUs")
