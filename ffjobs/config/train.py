"""Configuration of the DDP trainer: optimisation, precision, checkpoints, fault drills."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class FaultInjection:
    """Drills for the recovery path; all off unless configured.

    The step drills (kill, hang, raise in collective) fire once per checkpoint directory: a
    marker written there before firing keeps a restarted job from failing at the same step.
    """

    kill_rank: int | None = field(default=None, metadata={"ge": 0})
    """Rank that SIGKILLs itself at ``kill_at_step`` (the launcher then stops the others)."""
    kill_at_step: int | None = field(default=None, metadata={"ge": 1})
    hang_rank: int | None = field(default=None, metadata={"ge": 0})
    """Rank that stops participating in collectives at ``hang_at_step`` (others time out)."""
    hang_at_step: int | None = field(default=None, metadata={"ge": 1})
    raise_in_collective_at_step: int | None = field(default=None, metadata={"ge": 1})
    """Every rank raises from inside the gradient all-reduce of this step."""
    raise_rank: int | None = field(default=None, metadata={"ge": 0})
    """Rank that raises ``raise_error`` from the training step at ``raise_at_step``."""
    raise_at_step: int | None = field(default=None, metadata={"ge": 1})
    raise_error: Literal["user_code", "out_of_memory"] = "user_code"
    """``user_code``: a plain ``ValueError`` (a bug); ``out_of_memory``: ``torch.OutOfMemoryError``
    with the CUDA allocator's message (what a too-large batch ends with)."""
    every_time: bool = False
    """Fire the step drills in every run, not once per job (drills of a failure that persists)."""
    corrupt_latest_checkpoint: bool = False
    """Flip bytes in each checkpoint right after it is written (tests the fallback)."""
    pause_at_step: int | None = field(default=None, metadata={"ge": 1})
    """Every rank waits as this step starts until ``pause_until_file`` exists, then trains on:
    a drill does something to the world mid-training (stops the tracking server, cuts a link)
    and lets training go on when it has seen what it wanted. An existing file: no pause."""
    pause_until_file: str | None = None
    """The file whose creation ends the pause (a path every rank sees)."""

    def __post_init__(self) -> None:
        if (self.kill_rank is None) != (self.kill_at_step is None):
            raise ValueError("kill_rank: kill_rank and kill_at_step must be set together")
        if (self.hang_rank is None) != (self.hang_at_step is None):
            raise ValueError("hang_rank: hang_rank and hang_at_step must be set together")
        if (self.raise_rank is None) != (self.raise_at_step is None):
            raise ValueError("raise_rank: raise_rank and raise_at_step must be set together")
        if (self.pause_at_step is None) != (self.pause_until_file is None):
            raise ValueError(
                "pause_at_step: pause_at_step and pause_until_file must be set together"
            )


@dataclass
class TrainConfig:
    steps: int = field(default=200, metadata={"ge": 1})
    """Optimizer steps to train for."""
    batch_size: int = field(default=8, metadata={"ge": 1})
    """Per-rank micro-batch size."""
    grad_accum: int = field(default=1, metadata={"ge": 1})
    """Micro-batches per optimizer step; all but the last skip the gradient all-reduce."""
    lr: float = field(default=2e-4, metadata={"gt": 0.0, "le": 1.0})
    """Generator learning rate."""
    lr_discriminator: float = field(default=2e-4, metadata={"gt": 0.0, "le": 1.0})
    betas: list[float] = field(default_factory=lambda: [0.0, 0.99])
    weight_decay: float = field(default=0.0, metadata={"ge": 0.0})
    adam_eps: float = field(default=1e-8, metadata={"gt": 0.0})
    """Adam's epsilon. Updates of parameters whose gradient is mathematically zero (a conv bias
    right before instance norm) are rounding noise divided by about this value."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """After ``warmup_steps`` of linear warmup: constant, or cosine decay to ``min_lr_ratio``."""
    warmup_steps: int = field(default=0, metadata={"ge": 0})
    min_lr_ratio: float = field(default=0.1, metadata={"ge": 0.0, "le": 1.0})
    grad_clip: float | None = field(default=1.0, metadata={"gt": 0.0})
    """Max global gradient norm of each network; null: no clipping."""
    ema_decay: float | None = field(default=0.999, metadata={"gt": 0.0, "lt": 1.0})
    """Decay of the generator's exponential moving average; null: no EMA."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """``bf16``: autocast; ``fp16``: autocast with a gradient scaler per network."""
    channels_last: bool = False
    compile: bool = False
    """Wrap generator and discriminator in ``torch.compile``."""
    compile_mode: Literal["default", "reduce-overhead"] = "default"
    """With ``compile``: ``torch.compile``'s mode. ``reduce-overhead`` replays each compiled
    region's kernels as a CUDA graph (one launch instead of hundreds from Python; each step
    starts a new graph generation); it needs the static shapes the trainer has. The GPU
    preset's mode."""
    compile_cache: bool = True
    """With ``compile``: keep the compiler's caches as a blob beside the checkpoints
    (``compile-cache.bin``), so a restarted job of the run compiles warm, and the compiled
    regions' Dynamo captures (``compile-cache.regions.<device>.bin``), so it does not trace the
    networks again (:mod:`ffjobs.train.compile.regions`)."""
    fused_adam: bool = True
    """Use the fused Adam kernel on CUDA (ignored on CPU)."""
    bucket_cap_mb: float = field(default=25.0, metadata={"gt": 0.0})
    """DDP gradient bucket size."""
    seed: int = 0
    deterministic: bool = False
    """Deterministic kernels (slower on GPU); needed for bitwise resume on GPU."""
    cudnn_benchmark: bool = True
    """On CUDA (not with ``deterministic``): cuDNN times its algorithms on each convolution
    shape's first call and keeps the fastest, in memory. The timing is paid again by every
    start, restarts included; off, cuDNN picks by its heuristics."""
    log_every: int = field(default=10, metadata={"ge": 1})
    """Steps between metric reports (console and MLflow)."""
    progress: bool = True
    """Show a progress line on rank 0's console."""
    checkpoint_every: int = field(default=50, metadata={"ge": 1})
    keep_checkpoints: int = field(default=3, metadata={"ge": 1})
    async_checkpoint: bool = False
    """Copy the state to shared host memory, then write it from a writer process while training
    goes on (it needs ``/dev/shm`` room for one copy of the state; where there is too little,
    the save is synchronous and says so). Off by default: a CPU run's snapshot costs about
    what its write does, and drills and tests want a checkpoint durable when the save returns;
    the GPU preset turns it on."""
    checkpoint_dir: str = "runs/checkpoints"
    """Local shared directory or ``s3://bucket/prefix``."""
    resume: bool = True
    """Start from the newest verified checkpoint in ``checkpoint_dir`` when there is one."""
    peak_flops: float = field(default=790e12, metadata={"gt": 0.0})
    """Per-device peak FLOP/s that MFU is reported against (H200 bf16 dense, measured)."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """``auto``: nccl when CUDA is available, else gloo."""
    init_timeout_s: float = field(default=300.0, metadata={"gt": 0.0})
    """How long ranks wait for each other at the rendezvous."""
    collective_timeout_s: float = field(default=600.0, metadata={"gt": 0.0})
    """How long one collective may take before the communicator is torn down."""
    faults: FaultInjection = field(default_factory=FaultInjection)

    def __post_init__(self) -> None:
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas: must be two numbers in [0, 1), got {self.betas}")
        if self.warmup_steps > self.steps:
            raise ValueError(f"warmup_steps: must be <= steps ({self.steps})")
