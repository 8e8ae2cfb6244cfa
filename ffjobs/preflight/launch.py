"""Start the preflight ranks: as local processes (``--local``) or as a SLURM job via submitit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ffjobs.errors import UserError
from ffjobs.local_ranks import free_loopback_port, rank_environment
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
    """Run ``nproc`` ranks as child processes on loopback; return a launch error or None."""
    port = free_loopback_port()
    log_dir = run_dir / RANK_LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    for rank in range(nproc):
        env = rank_environment(rank, nproc, port)
        with open(log_dir / f"rank-{rank:05d}.out", "wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "ffjobs.preflight.worker", str(run_dir)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
    deadline = time.monotonic() + timeout_s
    first_failure: float | None = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if any(p.returncode not in (None, 0) for p in procs) and first_failure is None:
            first_failure = now
        # A dead rank leaves the others blocked in a collective: give them a moment, then stop.
        if now > deadline or (first_failure is not None and now - first_failure > 10):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            if now > deadline:
                return f"ranks did not finish within {timeout_s:g} s; see {log_dir}"
            break
        time.sleep(0.05)
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if failed and not any((run_dir / "ranks").glob("rank-*.json")):
        return (
            f"rank(s) {', '.join(map(str, failed))} exited with "
            f"{procs[failed[0]].returncode}; see {log_dir}"
        )
    return None


def _slurm_rank_entry(run_dir: str) -> int:
    """What each SLURM task runs: rank environment from submitit, then one preflight rank."""
    from submitit.helpers import TorchDistributedEnvironment

    dist_env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    os.environ["MASTER_ADDR"] = node_address(dist_env.master_addr)
    from ffjobs.preflight.worker import run_rank

    return run_rank(run_dir)


def _make_executor(cfg, run_dir: Path):
    """The submitit executor of the training job's shape (same nodes, tasks, GPUs, partition)."""
    from ffjobs.slurm.executor import make_executor

    executor = make_executor(cfg, run_id=f"preflight-{run_dir.name}", attempt=0)
    # a preflight is a few minutes, not the training job's time limit
    timeout_min = max(1, int(cfg.preflight.timeout_s * 2 // 60) + 1)
    executor.update_parameters(timeout_min=timeout_min, name=f"{cfg.name}-preflight")
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
