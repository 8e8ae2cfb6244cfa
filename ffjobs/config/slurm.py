"""Configuration of where jobs run: a cluster profile (SLURM) or the local executor."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class SlurmConfig:
    executor: Literal["local", "slurm"] = "local"
    """``local``: submitit's local executor on this machine; ``slurm``: sbatch on a cluster."""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    # 1024 is beyond any one training job this product runs (data-parallel over a few dozen
    # nodes) yet catches a slip such as 10000, which would sit in the queue or hit the scheduler
    nodes: int = field(default=1, metadata={"ge": 1, "le": 1024})
    gpus_per_node: int = field(default=0, metadata={"ge": 0})
    tasks_per_node: int = field(default=1, metadata={"ge": 1})
    """One task per GPU on GPU clusters; on CPU, ranks per node."""
    cpus_per_task: int = field(default=1, metadata={"ge": 1})
    mem_gb: float = field(default=4.0, metadata={"gt": 0.0})
    time_min: int = field(default=60, metadata={"ge": 1})
    exclude: list[str] = field(default_factory=list)
    """Nodes never to run on (the retry path adds suspect nodes here)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment for every task, e.g. NCCL_SOCKET_IFNAME, NCCL_IB_HCA."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run before the task (module loads, container activation)."""
    container_image: str | None = None
    """If set, run under pyxis/enroot (``--container-image``)."""
    srun_args: list[str] = field(default_factory=list)
    """Extra ``srun`` arguments for every task, e.g. ``--container-mounts=/data:/data``."""
    python: str | None = None
    """Python command on the nodes; default: the interpreter that submits (same venv)."""
    folder: str = "runs/slurm"
    """Shared directory for submitit's pickles and logs, keyed by run and attempt."""
    max_attempts: int = field(default=4, metadata={"ge": 1})
    """Attempt budget of a training job on SLURM: the first submission plus its retries."""
    retry_backoff_s: float = field(default=10.0, metadata={"ge": 0.0})
    """Wait before the first retry; doubles with each further one, up to ``retry_backoff_max_s``."""
    retry_backoff_max_s: float = field(default=300.0, metadata={"ge": 0.0})
    restarts_in_allocation: int = field(default=0, metadata={"ge": 0})
    """The fast path: restarts of the whole worker group on the same nodes, inside the job's
    allocation, before the job fails and a new one is submitted (0: every failure is a new
    job). One elastic agent per node then starts that node's ranks."""

    def __post_init__(self) -> None:
        bad = [name for name in self.env if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"env: {bad[0]!r} is not a valid environment variable name")
