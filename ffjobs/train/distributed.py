"""Distributed setup in one place: where rank and world come from, which backend, which timeouts.

Sources of the rank environment, first match wins:

1. submitit (``SUBMITIT_EXECUTOR`` set): ``submitit.helpers.TorchDistributedEnvironment``;
2. SLURM (``SLURM_PROCID`` and ``SLURM_NTASKS``): the first host of ``SLURM_JOB_NODELIST`` is
   the rendezvous host;
3. torchrun or ``ffjobs train --nproc`` (``RANK`` and ``WORLD_SIZE``);
4. nothing: a single process.

Everything after :func:`compute_init` is backend-agnostic, so the same trainer runs with gloo on
CPU in CI and with NCCL on GPUs.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ffjobs.errors import UserError

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: str
    """``submitit``, ``slurm``, ``torchrun`` or ``single``."""

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def expand_first_host(nodelist: str) -> str:
    """First host of a SLURM node list (``node[3-5,7],gpu1`` -> ``node3``).

    Uses ``scontrol show hostnames`` when available, else a parser for the common forms.
    """
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    first = re.split(r",(?![^\[]*\])", nodelist.strip())[0]
    match = re.fullmatch(r"([^\[]+)\[([^\]]+)\](.*)", first)
    if not match:
        return first
    prefix, ranges, suffix = match.groups()
    start = ranges.split(",")[0].split("-")[0]
    return f"{prefix}{start}{suffix}"


def detect_env(environ: dict[str, str] | None = None) -> DistEnv:
    """Read rank, world size and rendezvous address from submitit, SLURM or torchrun variables."""
    env = os.environ if environ is None else environ
    if "SUBMITIT_EXECUTOR" in env and "SLURM_PROCID" in env and environ is None:
        from submitit.helpers import TorchDistributedEnvironment

        tde = TorchDistributedEnvironment()
        return DistEnv(
            tde.rank, tde.world_size, tde.local_rank, tde.master_addr, tde.master_port, "submitit"
        )
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistEnv(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", DEFAULT_PORT)),
            source="torchrun",
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        job_id = int(env.get("SLURM_JOB_ID", "0"))
        return DistEnv(
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env["SLURM_NTASKS"]),
            local_rank=int(env.get("SLURM_LOCALID", "0")),
            master_addr=env.get("MASTER_ADDR")
            or expand_first_host(env.get("SLURM_JOB_NODELIST", "127.0.0.1")),
            # a job-specific port, so two jobs sharing a first node do not collide
            master_port=int(env.get("MASTER_PORT", 20000 + job_id % 20000)),
            source="slurm",
        )
    return DistEnv(0, 1, 0, "127.0.0.1", DEFAULT_PORT, "single")


def shared_store_restart_hazard(environ: Mapping[str, str] | None = None) -> str | None:
    """Why a torchrun restart may fail to re-form the group, or ``None`` if it will not.

    With the c10d rendezvous, torchrun by default lends its own store to the workers for
    ``init_process_group``, and that store outlives a restart: the restarted ranks can read the
    previous attempt's (dead) peer addresses and fail to connect (pytorch/pytorch#135712, still
    so in torch 2.14). ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in torchrun's environment gives
    every attempt a fresh store.
    """
    env = os.environ if environ is None else environ
    shared = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if not shared or int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) == 0:
        return None
    return (
        "torchrun shares its rendezvous store with the workers, so a restarted group may read "
        "the previous attempt's addresses and fail to connect; start torchrun with "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 when --max-restarts is above 0"
    )


def pick_backend(requested: str) -> str:
    """``auto`` resolves to nccl when CUDA is available, else gloo."""
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return requested


def pick_device(env: DistEnv, backend: str) -> torch.device:
    """This rank's GPU (``local_rank``) for nccl, the CPU for gloo."""
    if backend == "nccl" and not torch.cuda.is_available():
        raise UserError(
            "train.backend: nccl needs CUDA GPUs and none is visible; "
            "use --set train.backend=auto (gloo on CPU)"
        )
    if backend == "nccl":
        torch.cuda.set_device(env.local_rank)
        return torch.device("cuda", env.local_rank)
    return torch.device("cpu")


def compute_init(
    backend: str = "auto", init_timeout_s: float = 300.0, collective_timeout_s: float = 600.0
) -> tuple[DistEnv, torch.device]:
    """Join the process group (if there is more than one rank) and pick this rank's device.

    The rendezvous uses its own ``TCPStore`` so the init timeout is separate from the
    collective timeout that the communicator enforces on every operation.
    """
    # Surface NCCL errors as exceptions (and a dead communicator as a dead process) instead of
    # a silent hang; a retry supervisor can only act on a rank that exits.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    env = detect_env()
    if env.rank == 0 and (hazard := shared_store_restart_hazard()):
        warnings.warn(hazard, stacklevel=2)
    backend = pick_backend(backend)
    device = pick_device(env, backend)
    if env.is_distributed and not dist.is_initialized():
        store = dist.TCPStore(
            env.master_addr,
            env.master_port,
            world_size=env.world_size,
            is_master=env.rank == 0,
            timeout=datetime.timedelta(seconds=init_timeout_s),
        )
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(
            backend=backend,
            store=store,
            rank=env.rank,
            world_size=env.world_size,
            timeout=datetime.timedelta(seconds=collective_timeout_s),
            **kwargs,
        )
    return env, device


def compute_cleanup() -> None:
    """Leave the process group cleanly (a missing teardown makes NCCL warn and may hang exit)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    if get_world_size() > 1:
        dist.barrier()


def print0(*args: object, **kwargs: object) -> None:
    """``print`` on rank 0 only."""
    if get_rank() == 0:
        print(*args, **kwargs, flush=True)  # type: ignore[call-overload]
