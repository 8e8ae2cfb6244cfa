"""Run the whole preflight: prepare the run directory, launch the ranks, judge, write the report.

:func:`run_preflight` is the blocking driver (the CLI, ``ffjobs run``, the Airflow task of the
local profile). On SLURM it takes the same steps as the deferring Airflow operator, which waits
for the job in the triggerer instead: :func:`prepare`, :func:`~ffjobs.preflight.launch.
submit_slurm`, a wait for the job's end, :func:`read_slurm_job`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ffjobs.config.backend import choose_backend
from ffjobs.errors import UserError
from ffjobs.local_ranks import local_gpu_count
from ffjobs.preflight.launch import (
    SubmissionFailed,
    ended_job_error,
    launch_local,
    preflight_nodes,
    read_job_note,
    submit_slurm,
    wait_for_end,
)
from ffjobs.preflight.report import build_report, write_report
from ffjobs.preflight.worker import JOB_FILE


def run_preflight(
    cfg, run_dir: Path, *, local: bool, run_key: str, sysfs_root: str | None = None
) -> dict[str, Any]:
    """Run the preflight for ``cfg`` (a full :class:`ffjobs.config.Config`) of run ``run_key``
    into ``run_dir`` (a new folder); return the report. Locally, ``slurm.tasks_per_node``
    ranks; else one SLURM job of the training job's shape, waited for here."""
    job = prepare(cfg, run_dir, local=local, sysfs_root=sysfs_root)
    if local:
        launched = time.time()
        error = launch_local(run_dir, job["world_size"], cfg.preflight.timeout_s * 2 + 30)
        return finish(cfg, run_dir, error, mode="local", launched=launched)
    try:
        job_id = submit_slurm(cfg, run_dir, run_key)
    except SubmissionFailed as exc:
        return finish(cfg, run_dir, str(exc), mode=cfg.slurm.executor)
    return read_slurm_job(cfg, run_dir, run_key, wait_for_end(job_id))


def prepare(cfg, run_dir: Path, *, local: bool, sysfs_root: str | None = None) -> dict[str, Any]:
    """Create ``run_dir`` (a new folder) with the job file every rank reads; return the job."""
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
        "prepared_at": time.time(),
    }
    (run_dir / JOB_FILE).write_text(json.dumps(job, indent=1), encoding="utf-8")
    return job


def read_slurm_job(cfg, run_dir: Path, run_key: str, status) -> dict[str, Any]:
    """The report of the preflight in ``run_dir`` whose SLURM job ended with ``status`` (a
    :class:`~ffjobs.slurm.jobstate.JobStatus`): its ranks' files, and what the job itself says
    where they cannot (it failed before they wrote any)."""
    error = ended_job_error(cfg, run_dir, run_key, status)
    launched = read_job_note(run_dir).get("launched_at")
    return finish(cfg, run_dir, error, mode=cfg.slurm.executor, launched=launched)


def finish(
    cfg, run_dir: Path, error: str | None, *, mode: str, launched: float | None = None
) -> dict[str, Any]:
    """Judge the preflight in ``run_dir`` from its ranks' files (and the launch ``error``), and
    write its report there; return the report."""
    job = json.loads((run_dir / JOB_FILE).read_text(encoding="utf-8"))
    report = build_report(
        run_dir, cfg.preflight, job["world_size"], job["backend"], launch_error=error
    )
    report["mode"] = mode
    report["elapsed_s"] = round(time.time() - float(job["prepared_at"]), 2)
    rank0_start = report.pop("_rank0_start", None)
    if rank0_start and launched:
        report["rank0_phases_s"] = {
            "launch->start": round(rank0_start - launched, 3),
            **report["rank0_phases_s"],
        }
    write_report(report, run_dir)
    return report
