"""Start the preflight ranks: as local processes (``--local``) or as a SLURM job via submitit."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from pathlib import Path

from ffjobs.errors import UserError
from ffjobs.local_ranks import LaunchFailed, launch_ranks

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


def resolvable_address(node: str) -> str:
    """``node`` if it resolves, else its SLURM ``NodeAddr`` (node names need not be hostnames)."""
    try:
        socket.gethostbyname(node)
        return node
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", node, "-o"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return node
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node


def _slurm_rank_entry(run_dir: str) -> int:
    """What each SLURM task runs: rank environment from submitit, then one preflight rank."""
    from submitit.helpers import TorchDistributedEnvironment

    dist_env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    os.environ["MASTER_ADDR"] = resolvable_address(dist_env.master_addr)
    from ffjobs.preflight.worker import run_rank

    return run_rank(run_dir)


def _make_executor(cfg, run_dir: Path):
    """The submitit executor of the training job's shape (same nodes, tasks, GPUs, partition)."""
    try:
        from ffjobs.slurm.executor import make_executor
    except ImportError:
        make_executor = None
    timeout_min = max(1, int(cfg.preflight.timeout_s * 2 // 60) + 1)
    if make_executor is not None:  # the shared factory: same shape and folders as training
        executor = make_executor(cfg, run_id=f"preflight-{run_dir.name}", attempt=0)
        executor.update_parameters(timeout_min=timeout_min, name=f"{cfg.name}-preflight")
        return executor
    import submitit

    slurm = cfg.slurm
    executor = submitit.AutoExecutor(
        folder=run_dir / "submitit", cluster="slurm" if slurm.executor == "slurm" else "local"
    )
    params: dict = {
        "nodes": slurm.nodes,
        "tasks_per_node": slurm.tasks_per_node,
        "cpus_per_task": slurm.cpus_per_task,
        "mem_gb": slurm.mem_gb,
        "timeout_min": timeout_min,
        "name": f"{cfg.name}-preflight",
    }
    if slurm.gpus_per_node:
        params["gpus_per_node"] = slurm.gpus_per_node
    slurm_params = {
        k: v
        for k, v in (
            ("slurm_partition", slurm.partition),
            ("slurm_account", slurm.account),
            ("slurm_qos", slurm.qos),
            ("slurm_constraint", slurm.constraint),
        )
        if v
    }
    if slurm.exclude:
        slurm_params["slurm_exclude"] = ",".join(slurm.exclude)
    if slurm.setup:
        slurm_params["slurm_setup"] = list(slurm.setup)
    if slurm.executor == "slurm":
        params.update(slurm_params)
    executor.update_parameters(**params)
    return executor


def launch_slurm(cfg, run_dir: Path) -> tuple[str | None, int]:
    """Submit the ranks as one SLURM job and wait; return (launch error or None, world size)."""
    try:
        executor = _make_executor(cfg, run_dir)
    except ImportError as exc:
        raise UserError(f"SLURM mode needs submitit ({exc}); install it or use --local") from None
    world = cfg.slurm.nodes * cfg.slurm.tasks_per_node
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
