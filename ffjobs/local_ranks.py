"""Environment of N ranks started as processes on this machine (torchrun-style, loopback).

Shared by the local launchers of training and preflight; standard library only, so a launcher
starts its ranks without importing torch itself.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

# Variables that would make a rank believe it is a SLURM/submitit task instead of a local one.
SCHEDULER_VARS = ("SUBMITIT_EXECUTOR", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_environment(
    rank: int, nproc: int, port: int, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the variables of local rank ``rank``.

    Scheduler variables are dropped, and each rank gets its share of the cores as threads
    unless OMP_NUM_THREADS is already set: N ranks each starting one thread per core would
    oversubscribe the machine N times.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items()}
    for name in SCHEDULER_VARS:
        env.pop(name, None)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    return env
