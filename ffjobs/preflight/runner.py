"""Run the whole preflight: prepare the run directory, launch the ranks, judge, write the report."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ffjobs.backend import choose_backend
from ffjobs.errors import UserError
from ffjobs.preflight.launch import launch_local, launch_slurm, local_gpu_count, preflight_nodes
from ffjobs.preflight.report import build_report, write_report
from ffjobs.preflight.worker import JOB_FILE


def run_preflight(
    cfg, run_dir: Path, *, local: bool, run_key: str, sysfs_root: str | None = None
) -> dict[str, Any]:
    """Run the preflight for ``cfg`` (a full :class:`ffjobs.config.Config`) of run ``run_key``
    into ``run_dir`` (a new folder); return the report. Locally, ``slurm.tasks_per_node``
    ranks; else one SLURM job of the training job's shape."""
    started = time.perf_counter()
    pre = cfg.preflight
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise UserError(f"preflight: cannot create {run_dir}: {exc.strerror}") from None
    if local:
        gpus = local_gpu_count()
        backend = choose_backend(pre.backend, gpus, key="preflight.backend")
        world = cfg.slurm.tasks_per_node
        if backend == "nccl" and world > gpus:
            raise UserError(
                f"slurm.tasks_per_node: {world} NCCL ranks need {world} GPUs, {gpus} visible "
                "here; use --nproc to start fewer ranks"
            )
    else:
        gpus = cfg.slurm.gpus_per_node
        backend = choose_backend(pre.backend, gpus, key="preflight.backend")
        world = preflight_nodes(cfg) * cfg.slurm.tasks_per_node
    job = {
        "preflight": asdict(pre),
        "backend": backend,
        "world_size": world,
        "sysfs_root": sysfs_root,
        "env": dict(cfg.slurm.env),
    }
    (run_dir / JOB_FILE).write_text(json.dumps(job, indent=1), encoding="utf-8")
    timeout = pre.timeout_s * 2 + 30
    launched = time.time()
    if local:
        error = launch_local(run_dir, world, timeout)
    else:
        error, world = launch_slurm(
            cfg, run_dir, run_key, attempt=len(list(run_dir.parent.iterdir()))
        )
    report = build_report(run_dir, pre, world, backend, launch_error=error)
    report["mode"] = "local" if local else cfg.slurm.executor
    report["elapsed_s"] = round(time.perf_counter() - started, 2)
    rank0_start = report.pop("_rank0_start", None)
    if rank0_start:
        report["rank0_phases_s"] = {
            "launch->start": round(rank0_start - launched, 3),
            **report["rank0_phases_s"],
        }
    write_report(report, run_dir)
    return report
