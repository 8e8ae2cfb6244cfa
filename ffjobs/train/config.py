"""Configuration of the DDP trainer: optimisation, precision, checkpoints, fault drills."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class FaultInjection:
    """Drills for the recovery path; all off unless configured."""

    kill_rank: int | None = None
    kill_at_step: int | None = None
    hang_rank: int | None = None
    hang_at_step: int | None = None
    raise_in_collective_at_step: int | None = None
    corrupt_latest_checkpoint: bool = False

    def __post_init__(self) -> None:
        if (self.kill_rank is None) != (self.kill_at_step is None):
            raise ValueError("kill_rank: kill_rank and kill_at_step must be set together")
        if (self.hang_rank is None) != (self.hang_at_step is None):
            raise ValueError("hang_rank: hang_rank and hang_at_step must be set together")


@dataclass
class TrainConfig:
    steps: int = field(default=200, metadata={"ge": 1})
    """Optimizer steps to train for."""
    batch_size: int = field(default=8, metadata={"ge": 1})
    """Per-rank micro-batch size."""
    grad_accum: int = field(default=1, metadata={"ge": 1})
    lr: float = field(default=2e-4, metadata={"gt": 0.0, "le": 1.0})
    """Generator learning rate."""
    lr_discriminator: float = field(default=2e-4, metadata={"gt": 0.0, "le": 1.0})
    betas: list[float] = field(default_factory=lambda: [0.0, 0.99])
    warmup_steps: int = field(default=0, metadata={"ge": 0})
    grad_clip: float | None = field(default=1.0, metadata={"gt": 0.0})
    ema_decay: float | None = field(default=0.999, metadata={"gt": 0.0, "lt": 1.0})
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    channels_last: bool = False
    compile: bool = False
    seed: int = 0
    deterministic: bool = False
    log_every: int = field(default=10, metadata={"ge": 1})
    checkpoint_every: int = field(default=50, metadata={"ge": 1})
    keep_checkpoints: int = field(default=3, metadata={"ge": 1})
    checkpoint_dir: str = "runs/checkpoints"
    """Local shared directory or ``s3://bucket/prefix``."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    init_timeout_s: float = field(default=300.0, metadata={"gt": 0.0})
    collective_timeout_s: float = field(default=600.0, metadata={"gt": 0.0})
    faults: FaultInjection = field(default_factory=FaultInjection)

    def __post_init__(self) -> None:
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas: must be two numbers in [0, 1), got {self.betas}")
