"""One preflight rank: probe, check the environment, agree, then measure; results go to a file.

Ranks meet first on a plain TCP store (no collective): if any node's environment is wrong,
every rank stops there, so a bad ``NCCL_SOCKET_IFNAME`` fails before NCCL is touched. The
rendezvous and the process group are training's own (``ffjobs.train.distributed``), so the
preflight measures the communicator training will get. The launching process reads the
per-rank files and builds the report (see ``report.py``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffjobs.config.preflight import PreflightConfig
from ffjobs.preflight.ib import IbPort, check_ib_ports
from ffjobs.preflight.nccl_env import check_environment
from ffjobs.preflight.probe import node_name, probe_node, probe_topology
from ffjobs.process_tree import follow_launcher

if TYPE_CHECKING:  # the launcher imports this module and must not pay for torch
    from ffjobs.train.distributed import DistEnv

JOB_FILE = "job.json"
RANKS_DIR = "ranks"
NCCL_LOG_DIR = "nccl"


def rank_file(run_dir: Path, rank: int) -> Path:
    return run_dir / RANKS_DIR / f"rank-{rank:05d}.json"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def _enable_nccl_debug(run_dir: Path, rank: int) -> None:
    """Send this rank's NCCL INFO output (channel transports, network) to its own file."""
    log_dir = run_dir / NCCL_LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    os.environ["NCCL_DEBUG"] = "INFO"
    # Channel lines are logged under INIT|P2P, "Using network" under INIT|NET, variables
    # NCCL picked up under ENV; WARN lines always print.
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,P2P,SHM,NET,ENV")
    os.environ["NCCL_DEBUG_FILE"] = str(log_dir / f"rank-{rank:05d}.%h.%p.log")


def _agree_on_environment(
    store, rank: int, world: int, failed: list[str], timeout_s: float
) -> list[str]:
    """Publish this rank's env failures on the store; return every rank's, in rank order."""
    store.set(f"preflight/env/{rank}", json.dumps(failed))
    keys = [f"preflight/env/{r}" for r in range(world)]
    store.wait(keys, timedelta(seconds=timeout_s))
    everyone: list[str] = []
    for key in keys:
        everyone += json.loads(store.get(key).decode())
    return everyone


def _groups_by_node(nodes: list[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for rank, node in enumerate(nodes):
        groups.setdefault(node, []).append(rank)
    return groups


def _group_checks(
    cfg: PreflightConfig, dtype, device, rank: int, nodes: list[str]
) -> dict[str, Any]:
    """Per-node (intra-node) and node-pair all-reduces that single out a slow node or link."""
    import torch.distributed as dist

    from ffjobs.preflight.sweep import MIB, measure_size

    by_node = _groups_by_node(nodes)
    names = list(by_node)
    plan: list[tuple[str, list[int]]] = []
    if len(names) > 1:
        plan += [(f"node:{n}", by_node[n]) for n in names if len(by_node[n]) > 1]
    if len(names) > 2:  # with two nodes the pair is the whole world, already measured
        for i, name in enumerate(names):
            other = names[(i + 1) % len(names)]
            plan.append((f"pair:{name}+{other}", by_node[name] + by_node[other]))
    results: dict[str, Any] = {}
    kwargs = dict(
        warmup=cfg.warmup_iters,
        min_iters=cfg.min_iters,
        max_iters=cfg.max_iters,
        target_time_s=cfg.target_time_s,
    )
    # new_group must be called by every rank, for every group, in the same order.
    groups = [(label, members, dist.new_group(members)) for label, members in plan]
    for label, members, group in groups:
        if rank in members:
            result = measure_size(
                int(cfg.pair_size_mib * MIB),
                dtype,
                device,
                group=group,
                group_size=len(members),
                **kwargs,
            )
            if rank == members[0]:
                results[label] = {"ranks": members, **result.to_dict()}
    return results


def run_rank(run_dir: str | Path) -> int:
    """Entry point of one rank; reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_*``."""
    from ffjobs.train.distributed import detect_env

    run_dir = Path(run_dir)
    started = time.time()
    job = json.loads((run_dir / JOB_FILE).read_text(encoding="utf-8"))
    cfg = PreflightConfig(**job["preflight"])
    for key, value in job.get("env", {}).items():  # the cluster profile's task environment
        os.environ.setdefault(key, str(value))
    # the launcher exported this rank's place (and a resolvable MASTER_ADDR) into the environment
    env = detect_env(os.environ)
    rank = env.rank
    backend = job["backend"]
    record: dict[str, Any] = {
        "rank": rank,
        "local_rank": env.local_rank,
        "node": node_name(),
        "status": "started",
        "timestamps": {"start": started},
    }
    if backend == "nccl":
        _enable_nccl_debug(run_dir, rank)
    try:
        return _run(run_dir, cfg, job, env, backend, record)
    except Exception as exc:  # a rank that dies must still leave its cause for the report
        record.update(
            status="error",
            error=f"{type(exc).__name__}: {exc}".splitlines()[0],
            traceback=traceback.format_exc(),
        )
        _write_json(rank_file(run_dir, rank), record)
        return 1


def _run(
    run_dir: Path,
    cfg: PreflightConfig,
    job: dict,
    env: DistEnv,
    backend: str,
    record: dict[str, Any],
) -> int:
    import torch
    import torch.distributed as dist

    from ffjobs.config.backend import choose_backend
    from ffjobs.preflight.sweep import sweep
    from ffjobs.train.distributed import join_process_group, pick_device, rendezvous

    rank, world = env.rank, env.world_size
    sysfs_root = job.get("sysfs_root") or "/sys"
    is_node_leader = env.local_rank == 0
    # the launcher chose from the GPUs it expected; a rank that sees none says so the same way
    choose_backend(backend, torch.cuda.device_count(), key="preflight.backend")
    # bind the GPU first so no rank opens a context on another's GPU
    device = pick_device(env, backend)
    dtype = torch.bfloat16 if backend == "nccl" else torch.float32
    probe = probe_node(sysfs_root)
    record["probe"] = probe
    record["timestamps"]["probed"] = time.time()
    topology: dict[str, Any] = {}
    topology_thread = None
    if cfg.probe_topology and is_node_leader and backend == "nccl":
        # nvidia-smi can take a second: overlap it with rendezvous and the sweep.
        topology_thread = threading.Thread(
            target=lambda: topology.update(probe_topology()), daemon=True
        )
        topology_thread.start()
    env_findings = check_environment(
        os.environ, probe["interfaces"], probe["node"], allow_nvls=cfg.allow_nvls
    )
    hca = os.environ.get("NCCL_IB_HCA") or None
    if probe["ib_ports"] or hca or cfg.expected_ib_rate_gbps is not None:
        ports = [IbPort(**p) for p in probe["ib_ports"]]
        env_findings += check_ib_ports(ports, hca, cfg.expected_ib_rate_gbps, probe["node"])
    record["env_findings"] = [f.to_dict() for f in env_findings]
    own_failures = [f.line() for f in env_findings if f.level == "FAIL"]

    store = rendezvous(env, cfg.timeout_s)
    failures = _agree_on_environment(store, rank, world, own_failures, cfg.timeout_s)
    record["timestamps"]["agreed"] = time.time()
    if failures:
        _join_topology(topology_thread, topology, probe)
        record.update(status="aborted", aborted_because=failures)
        _write_json(rank_file(run_dir, rank), record)
        store.set(f"preflight/done/{rank}", "1")
        if rank == 0:  # the store lives in rank 0: wait until every rank has read it
            store.wait(
                [f"preflight/done/{r}" for r in range(world)], timedelta(seconds=cfg.timeout_s)
            )
        return 0

    join_process_group(store, env, backend, device, cfg.timeout_s)
    try:
        record["timestamps"]["initialized"] = time.time()
        nodes: list[Any] = [None] * world
        dist.all_gather_object(nodes, probe["node"])
        results = sweep(
            cfg.sizes_mib,
            dtype,
            device,
            warmup=cfg.warmup_iters,
            min_iters=cfg.min_iters,
            max_iters=cfg.max_iters,
            target_time_s=cfg.target_time_s,
        )
        record["sweep"] = [r.to_dict() for r in results]
        record["timestamps"]["swept"] = time.time()
        record["group_checks"] = _group_checks(cfg, dtype, device, rank, nodes)
        record["world"] = {
            "size": world,
            "nodes": nodes,
            "backend": backend,
            "dtype": str(dtype).removeprefix("torch."),
        }
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _join_topology(topology_thread, topology, probe)
    record["timestamps"]["end"] = time.time()
    record["status"] = "ok"
    _write_json(rank_file(run_dir, rank), record)
    return 0


def _join_topology(thread, topology: dict[str, Any], probe: dict[str, Any]) -> None:
    if thread is not None:
        thread.join(timeout=15)
        probe.update(topology)


if __name__ == "__main__":
    follow_launcher()  # started by the local launcher: end with it
    sys.exit(run_rank(sys.argv[1]))
