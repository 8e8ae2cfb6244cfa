"""Distributed setup in one place: where rank and world come from, which backend, which timeouts.

Sources of the rank environment, first match wins:

1. submitit (``SUBMITIT_EXECUTOR`` set): ``submitit.helpers.TorchDistributedEnvironment``;
2. SLURM (``SLURM_PROCID`` and ``SLURM_NTASKS``): the first node of ``SLURM_JOB_NODELIST`` is
   the rendezvous host (at its ``NodeAddr`` when the node name does not resolve);
3. torchrun or ``ffjobs train --nproc`` (``RANK`` and ``WORLD_SIZE``);
4. nothing: a single process.

Joining is two steps, so a caller can agree on something before any backend is touched (the
preflight checks every node's environment first): :func:`rendezvous` meets every rank on a TCP
store, :func:`join_process_group` forms the process group on it. :func:`compute_init` does both
for training. Everything after it is backend-agnostic, so the same trainer runs with gloo on CPU
in CI and with NCCL on GPUs.
"""

from __future__ import annotations

import datetime
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ffjobs.config.backend import choose_backend
from ffjobs.errors import UserError
from ffjobs.slurm.nodes import NodeListError, first_node, job_port, node_address

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


def _slurm_master_addr(env: Mapping[str, str]) -> str:
    """``MASTER_ADDR`` if set, else the address of the job's first node."""
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    nodelist = env.get("SLURM_JOB_NODELIST", "127.0.0.1")
    try:
        return node_address(first_node(nodelist))
    except NodeListError as exc:
        raise UserError(f"SLURM_JOB_NODELIST: {exc}") from None


def detect_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read rank, world size and rendezvous address from submitit, SLURM or torchrun variables."""
    env = os.environ if environ is None else environ
    if "SUBMITIT_EXECUTOR" in env and "SLURM_PROCID" in env and environ is None:
        from submitit.helpers import TorchDistributedEnvironment

        tde = TorchDistributedEnvironment()
        master_addr = node_address(tde.master_addr)  # submitit gives the node name
        return DistEnv(
            tde.rank, tde.world_size, tde.local_rank, master_addr, tde.master_port, "submitit"
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
        return DistEnv(
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env["SLURM_NTASKS"]),
            local_rank=int(env.get("SLURM_LOCALID", "0")),
            master_addr=_slurm_master_addr(env),
            # a job-specific port, so two jobs sharing a first node do not collide
            master_port=int(env.get("MASTER_PORT", job_port(env.get("SLURM_JOB_ID", "0")))),
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


def pick_device(env: DistEnv, backend: str) -> torch.device:
    """This rank's GPU for nccl, the CPU for gloo; ``backend`` as :func:`choose_backend` gave it.

    The GPU is ``local_rank`` modulo the visible count, so a rank that SLURM bound to one GPU
    (``CUDA_VISIBLE_DEVICES`` of one device) uses that one.
    """
    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", env.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def rendezvous(env: DistEnv, timeout_s: float) -> dist.TCPStore:
    """Meet every rank on a TCP store hosted by rank 0; no collective backend is touched yet.

    Returns once all ``env.world_size`` ranks are connected and raises after ``timeout_s``. The
    store can carry plain key/value agreement before :func:`join_process_group` uses it, and it
    keeps the init timeout apart from the collective timeout of the communicator.
    """
    return dist.TCPStore(
        env.master_addr,
        env.master_port,
        world_size=env.world_size,
        is_master=env.rank == 0,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def join_process_group(
    store: dist.Store,
    env: DistEnv,
    backend: str,
    device: torch.device,
    collective_timeout_s: float,
) -> None:
    """Form the default process group on ``store``; every collective is bounded by the timeout."""
    # Surface NCCL errors as exceptions (and a dead communicator as a dead process) instead of
    # a silent hang; a retry supervisor can only act on a rank that exits.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(
        backend=backend,
        store=store,
        rank=env.rank,
        world_size=env.world_size,
        timeout=datetime.timedelta(seconds=collective_timeout_s),
        **kwargs,
    )


def compute_init(
    backend: str = "auto", init_timeout_s: float = 300.0, collective_timeout_s: float = 600.0
) -> tuple[DistEnv, torch.device]:
    """Join the process group (if there is more than one rank) and pick this rank's device.

    ``backend`` is ``train.backend``: ``auto`` becomes nccl when this rank sees a GPU.
    """
    env = detect_env()
    if env.rank == 0 and (hazard := shared_store_restart_hazard()):
        warnings.warn(hazard, stacklevel=2)
    backend = choose_backend(backend, torch.cuda.device_count(), key="train.backend")
    device = pick_device(env, backend)
    if env.is_distributed and not dist.is_initialized():
        store = rendezvous(env, init_timeout_s)
        join_process_group(store, env, backend, device, collective_timeout_s)
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
