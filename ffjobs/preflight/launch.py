"""Start the preflight ranks: as local processes (``--local``) or as a SLURM job via submitit."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from ffjobs.errors import UserError
from ffjobs.local_ranks import LaunchFailed, launch_ranks
from ffjobs.slurm.nodes import node_address

RANK_LOG_DIR = "logs"


def local_gpu_count() -> int:
    """GPUs this machine exposes, without importing torch (keeps the launcher fast)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def launch_local(run_dir: Path, nproc: int, timeout_s: float) -> str | None:
    """Run ``nproc`` ranks on this machine through the shared launcher; return a launch error
    (naming the rank that failed and its log) or None. The report is built from the rank
    files whatever happened, so a failed rank's own record still explains itself."""
    try:
        launch_ranks(
            lambda rank: [sys.executable, "-m", "ffjobs.preflight.worker", str(run_dir)],
            nproc,
            run_dir / RANK_LOG_DIR,
            console=io.StringIO(),  # preflight ranks only log; the report speaks for them
            timeout_s=timeout_s,
        )
    except LaunchFailed as exc:
        return str(exc).splitlines()[0]
    return None


def _slurm_rank_entry(run_dir: str) -> int:
    """What each SLURM task runs: rank environment from submitit, then one preflight rank."""
    from submitit.helpers import TorchDistributedEnvironment

    dist_env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    os.environ["MASTER_ADDR"] = node_address(dist_env.master_addr)
    from ffjobs.preflight.worker import run_rank

    return run_rank(run_dir)


def preflight_nodes(cfg) -> int:
    """Nodes of the preflight job: ``preflight.nodes``, else the training job's."""
    return cfg.preflight.nodes or cfg.slurm.nodes


def _make_executor(cfg, run_key: str, attempt: int):
    """The submitit executor of the training job's shape (tasks, GPUs, partition; the nodes of
    :func:`preflight_nodes`), named by the run and kept in the run's own folder
    (``<run key>.preflight/attempt-<n>``)."""
    from ffjobs.slurm.executor import make_executor

    executor = make_executor(cfg, run_id=f"{run_key}.preflight", attempt=attempt)
    # a preflight is a few minutes, not the training job's time limit
    timeout_min = max(1, int(cfg.preflight.timeout_s * 2 // 60) + 1)
    executor.update_parameters(
        nodes=preflight_nodes(cfg),
        timeout_min=timeout_min,
        name=f"{run_key}-preflight",
        slurm_comment=f"ffjobs run {run_key} preflight",
    )
    return executor


def launch_slurm(cfg, run_dir: Path, run_key: str, attempt: int = 0) -> tuple[str | None, int]:
    """Submit the ranks as one SLURM job and wait; return (launch error or None, world size)."""
    try:
        executor = _make_executor(cfg, run_key, attempt)
    except ImportError as exc:
        raise UserError(f"SLURM mode needs submitit ({exc}); install it or use --local") from None
    world = preflight_nodes(cfg) * cfg.slurm.tasks_per_node
    try:
        job = executor.submit(_slurm_rank_entry, str(run_dir.resolve()))
    except Exception as exc:  # sbatch rejected the job: say why in one line
        return f"submission failed: {str(exc).strip().splitlines()[-1]}", world
    try:
        job.results()
    except Exception as exc:  # the report names the failing ranks from their files
        text = str(exc).strip().splitlines()
        return (
            f"SLURM job {job.job_id} failed ({text[-1] if text else type(exc).__name__})"
            if not any((run_dir / "ranks").glob("rank-*.json"))
            else None
        ), world
    return None, world
