"""The face-fusion training loop: generator and discriminator in DDP, one file, top to bottom.

One optimizer step (``train_step``), per micro-batch of each rank:

1. source identity embedding (frozen encoder, no grad);
2. ``fused = G(target, embedding)``;
3. discriminator loss on real targets and detached fused images, backward into D;
4. generator loss through D's plain module (its weights frozen for this pass, so D's DDP
   does not see a second backward), backward into G;

then both optimizers step (a simultaneous update: both losses see the same D weights, which
keeps one step on a global batch equal to gradient accumulation or more ranks). All but the
last micro-batch run under ``no_sync`` so gradients are all-reduced once per step.

Exact resume: the checkpoint holds both networks, EMA, optimizers, schedulers, scalers, the
step, the data position and every rank's RNG states; with deterministic kernels and the same
world size a restarted run continues bit for bit.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ffjobs.config import Config
from ffjobs.data.dataset import to_model_images
from ffjobs.models import FusionModels, build
from ffjobs.models.losses import discriminator_loss, generator_loss
from ffjobs.tracking.mlflow_logger import RunLogger
from ffjobs.train.checkpoint import Checkpointer, capture_rng_state, restore_rng_state
from ffjobs.train.data import BatchStream
from ffjobs.train.distributed import DistEnv, print0
from ffjobs.train.ema import GeneratorEMA
from ffjobs.train.faults import FaultInjector
from ffjobs.train.metrics import CommTimer, ThroughputMeter, format_progress
from ffjobs.train.prefetch import DevicePrefetcher

LOSS_NAMES = ("d_real", "d_fused", "adversarial", "identity", "reconstruction", "feature_matching")


@dataclass
class TrainResult:
    """What a finished (or stopped) training run reports."""

    start_step: int
    final_step: int
    stopped_early: bool = False
    last_checkpoint: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)


def seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def lr_lambda(schedule: str, warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """Multiplier of the base LR at a step: linear warmup, then constant or cosine decay."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def _no_buffer_sync_per_forward() -> dict[str, bool]:
    """G and D have no batch norm, so buffers need no sync before every forward.

    torch >= 2.14 renamed ``broadcast_buffers`` to ``forward_sync_buffers`` (2.11 only knows
    the old name).
    """
    params = inspect.signature(DDP.__init__).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {key: False}


class Trainer:
    """Owns the networks, optimizers, data stream and checkpointer of one rank."""

    def __init__(
        self,
        config: Config,
        env: DistEnv,
        device: torch.device,
        dataset: torch.utils.data.Dataset,
        *,
        models: FusionModels | None = None,
        logger: RunLogger | None = None,
        flops_per_image: float | None = None,
    ):
        self.config, self.env, self.device = config, env, device
        tc = self.tc = config.train
        self.world_size = env.world_size
        if tc.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=False)
            torch.backends.cudnn.benchmark = False
        elif device.type == "cuda":
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

        # Same seed on every rank for identical initial weights (DDP also broadcasts rank 0's).
        seed_everything(tc.seed)
        models = models if models is not None else build(config.model)
        memory_format = torch.channels_last if tc.channels_last else torch.contiguous_format
        self.memory_format = memory_format
        generator = models.generator.to(device, memory_format=memory_format)
        discriminator = models.discriminator.to(device, memory_format=memory_format)
        self.identity_encoder = models.identity_encoder.to(device, memory_format=memory_format)
        self.identity_encoder.requires_grad_(False).eval()
        # From here on each rank draws its own random stream (data order comes from the sampler).
        seed_everything(tc.seed + 1000 * env.rank)

        self.ema = GeneratorEMA(generator, tc.ema_decay) if tc.ema_decay is not None else None
        self.checkpointer = Checkpointer(tc.checkpoint_dir, keep=tc.keep_checkpoints, s3=config.s3)
        # drills record having fired next to the checkpoints, so a restarted job is not hit again
        self.faults = FaultInjector(tc.faults, env.rank, self.checkpointer.store)
        self.comm = CommTimer(device)
        self.generator = self._wrap(generator)
        self.discriminator = self._wrap(discriminator)
        self.g_module: nn.Module = generator
        self.d_module: nn.Module = discriminator

        fused = tc.fused_adam and device.type == "cuda"

        def adam(module: nn.Module, lr: float) -> torch.optim.Adam:
            return torch.optim.Adam(
                module.parameters(),
                lr=lr,
                betas=tuple(tc.betas),
                weight_decay=tc.weight_decay,
                eps=tc.adam_eps,
                fused=fused or None,
            )

        self.opt_g = adam(generator, tc.lr)
        self.opt_d = adam(discriminator, tc.lr_discriminator)
        factor = lr_lambda(tc.lr_schedule, tc.warmup_steps, tc.steps, tc.min_lr_ratio)
        self.sched_g = torch.optim.lr_scheduler.LambdaLR(self.opt_g, factor)
        self.sched_d = torch.optim.lr_scheduler.LambdaLR(self.opt_d, factor)
        scaler_on = tc.precision == "fp16"
        self.scaler_g = torch.amp.GradScaler(device.type, enabled=scaler_on)
        self.scaler_d = torch.amp.GradScaler(device.type, enabled=scaler_on)
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(tc.precision)

        # a step's micro-batches are copied to the device while the step before computes
        self.data = DevicePrefetcher(
            BatchStream(
                dataset,
                tc.batch_size,
                env.rank,
                env.world_size,
                seed=tc.seed,
                num_workers=config.data.num_workers,
                pin_memory=device.type == "cuda",
                prefetch_factor=config.data.prefetch_factor,
            ),
            device,
            depth=tc.grad_accum,
        )
        self.logger = logger if logger is not None else RunLogger(config.tracking, active=False)
        self.meter = ThroughputMeter(device, self.comm)
        self.flops_per_image = flops_per_image
        self.step = 0
        self._stop_requested = False
        self._resumed_run_id: str | None = None
        self.skip_grad_sync = False
        """Benchmarks only: never all-reduce (measures the step without communication)."""

    # ----------------------------------------------------------------------------- setup

    def _wrap(self, module: nn.Module) -> nn.Module:
        """DDP with our timing comm hook (plus the fault drill); optionally compiled."""
        wrapped: nn.Module = module
        if self.world_size > 1:
            ddp = DDP(
                module,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                bucket_cap_mb=self.tc.bucket_cap_mb,
                gradient_as_bucket_view=True,
                **_no_buffer_sync_per_forward(),
            )
            ddp.register_comm_hook(None, self.faults.wrap_comm_hook(self.comm.hook))
            wrapped = ddp
        if self.tc.compile:
            wrapped = torch.compile(wrapped)
        return wrapped

    def _no_sync(self, sync: bool) -> contextlib.AbstractContextManager:
        """Skip the all-reduce of both networks for this micro-batch unless ``sync``."""
        if (sync and not self.skip_grad_sync) or self.world_size == 1:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        for wrapped in (self.generator, self.discriminator):
            ddp = getattr(wrapped, "_orig_mod", wrapped)
            stack.enter_context(ddp.no_sync())
        return stack

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # ----------------------------------------------------------------------------- one step

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """One optimizer step of G and D over ``micro_batches``; returns detached mean losses."""
        accum = len(micro_batches)
        self.opt_g.zero_grad(set_to_none=True)
        self.opt_d.zero_grad(set_to_none=True)
        totals = {name: torch.zeros((), device=self.device) for name in LOSS_NAMES}
        for index, batch in enumerate(micro_batches):
            source, target, same_identity = self._to_device(batch)
            with self._no_sync(sync=index == accum - 1):
                with self._autocast():
                    with torch.no_grad():
                        source_embedding = self.identity_encoder(source)
                    fused = self.generator(target, source_embedding)
                    disc_real = self.discriminator(target)
                    d_losses = discriminator_loss(
                        disc_real=disc_real, disc_fused=self.discriminator(fused.detach())
                    )
                with self.comm.backward():
                    self.scaler_d.scale(d_losses["total"] / accum).backward()

                self.d_module.requires_grad_(False)  # G's loss flows through D, not into it
                with self._autocast():
                    g_losses = generator_loss(
                        fused=fused,
                        target=target,
                        same_identity=same_identity,
                        source_embedding=source_embedding,
                        fused_embedding=self.identity_encoder(fused),
                        disc_fused=self.d_module(fused),
                        disc_real=disc_real,
                        weights=self.config.model.losses,
                    )
                with self.comm.backward():
                    self.scaler_g.scale(g_losses["total"] / accum).backward()
                self.d_module.requires_grad_(True)
            for name in LOSS_NAMES:
                value = d_losses.get(name, g_losses.get(name))
                totals[name] += value.detach().float() / accum

        self._optimizer_step(self.opt_d, self.scaler_d, self.d_module)
        self._optimizer_step(self.opt_g, self.scaler_g, self.g_module)
        self.sched_d.step()
        self.sched_g.step()
        if self.ema is not None:
            self.ema.update(self.g_module)
        return totals

    def _to_device(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """``uint8`` images to the model's float [-1, 1] (on the device, in its memory format)."""

        def images(x: torch.Tensor) -> torch.Tensor:
            return to_model_images(x, self.device, self.memory_format)

        same = batch["same_identity"].to(self.device, non_blocking=True)
        return images(batch["source"]), images(batch["target"]), same

    def _optimizer_step(
        self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, module: nn.Module
    ) -> None:
        if self.tc.grad_clip is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(module.parameters(), self.tc.grad_clip)
        scaler.step(optimizer)
        scaler.update()

    # ----------------------------------------------------------------------------- the loop

    def train(self) -> TrainResult:
        """Resume if a verified checkpoint exists, then train to ``train.steps``."""
        start = self.resume() if self.tc.resume else 0
        result = TrainResult(start_step=start, final_step=start)
        self._install_signal_handlers()
        # one MLflow run per training job: a restart continues the run its checkpoint names
        self.logger.start(self.config.name, self.config.to_dict(), run_id=self._resumed_run_id)
        self.logger.set_tags({"resumed_from_step": str(start)} if start else {})
        for _ in self.run_steps(self.tc.steps - start, result):
            pass
        return result

    def run_steps(self, count: int, result: TrainResult | None = None) -> Iterator[int]:
        """Run ``count`` optimizer steps, logging and checkpointing on schedule; yields steps."""
        result = result if result is not None else TrainResult(self.step, self.step)
        self.meter.reset()
        window_losses = {name: torch.zeros((), device=self.device) for name in LOSS_NAMES}
        window_steps = 0
        global_batch = self.tc.batch_size * self.tc.grad_accum * self.world_size
        for _ in range(count):
            step = self.step + 1
            self.faults.before_step(step)
            with self.meter.data_wait():
                micro_batches = [self.data.next() for _ in range(self.tc.grad_accum)]
            losses = self.train_step(micro_batches)
            self.step = step
            self.meter.step_done(global_batch)
            for name in LOSS_NAMES:
                window_losses[name] += losses[name]
            window_steps += 1

            last = step == self.tc.steps
            if step % self.tc.log_every == 0 or last:
                metrics = self._report(step, window_losses, window_steps)
                result.history.append(metrics)
                window_losses = {k: torch.zeros_like(v) for k, v in window_losses.items()}
                window_steps = 0
                self._stop_requested = self._agree(self._stop_requested)
            if step % self.tc.checkpoint_every == 0 or last or self._stop_requested:
                with self.meter.excluded():
                    result.last_checkpoint = self.save() or result.last_checkpoint
            result.final_step = step
            yield step
            if self._stop_requested:
                print0(f"stop requested: checkpoint written at step {step}, exiting")
                result.stopped_early = True
                return

    def _report(self, step: int, losses: dict[str, torch.Tensor], steps: int) -> dict[str, float]:
        stats = self.meter.window()
        stacked = torch.stack([losses[name] for name in LOSS_NAMES]) / max(steps, 1)
        if self.world_size > 1:
            dist.all_reduce(stacked)
            stacked /= self.world_size
        metrics: dict[str, float] = {"step": float(step)}
        metrics.update(stats.as_dict(self.world_size, self.flops_per_image, self.tc.peak_flops))
        metrics.update(
            {f"loss/{n}": float(v) for n, v in zip(LOSS_NAMES, stacked.tolist(), strict=True)}
        )
        metrics["lr"] = self.sched_g.get_last_lr()[0]
        if self.env.rank == 0:
            if self.tc.progress:
                print(format_progress(step, self.tc.steps, metrics), flush=True)
            self.logger.log_metrics({k: v for k, v in metrics.items() if k != "step"}, step)
        return metrics

    def _agree(self, flag: bool) -> bool:
        """True on every rank if any rank has it (a stop signal may reach ranks at different steps)."""
        if self.world_size == 1:
            return flag
        tensor = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())

    def _install_signal_handlers(self) -> None:
        """SIGTERM/SIGUSR1 (SLURM pre-emption): checkpoint at the next logging step and stop."""

        def request_stop(signum: int, _frame: object) -> None:
            print(
                f"rank {self.env.rank}: got signal {signum}; will checkpoint and stop",
                file=sys.stderr,
                flush=True,
            )
            self._stop_requested = True

        for sig in (signal.SIGTERM, signal.SIGUSR1):
            with contextlib.suppress(ValueError):  # not in the main thread
                signal.signal(sig, request_stop)

    # ----------------------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything shared by all ranks (rank 0's copy is the truth after DDP sync)."""
        return {
            "generator": self.g_module.state_dict(),
            "discriminator": self.d_module.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "opt_g": self.opt_g.state_dict(),
            "opt_d": self.opt_d.state_dict(),
            "sched_g": self.sched_g.state_dict(),
            "sched_d": self.sched_d.state_dict(),
            "scaler_g": self.scaler_g.state_dict(),
            "scaler_d": self.scaler_d.state_dict(),
            "world_size": self.world_size,
            "mlflow_run_id": self.logger.run_id,
            "config": self.config.to_dict(),
        }

    def rank_state(self) -> dict[str, Any]:
        return {"rng": capture_rng_state(), "data": self.data.state_dict()}

    def save(self) -> str | None:
        """Collective checkpoint of the current step; returns its location on rank 0."""
        started = time.perf_counter()
        location = self.checkpointer.save(self.step, self.state_dict(), self.rank_state())
        if location is not None:
            self.faults.after_checkpoint(self.checkpointer.store, location.rsplit("/", 1)[-1])
            print0(
                f"checkpoint step {self.step} -> {location} ({time.perf_counter() - started:.1f} s)"
            )
        return location

    def resume(self) -> int:
        """Load the newest verified checkpoint if there is one; return the step it is at."""
        ref = self.checkpointer.latest_verified()
        if ref is None:
            return 0
        state = self.checkpointer.load(ref)
        self.g_module.load_state_dict(state["generator"])
        self.d_module.load_state_dict(state["discriminator"])
        if self.ema is not None and state["ema"] is not None:
            self.ema.load_state_dict(state["ema"])
        self.opt_g.load_state_dict(state["opt_g"])
        self.opt_d.load_state_dict(state["opt_d"])
        self.sched_g.load_state_dict(state["sched_g"])
        self.sched_d.load_state_dict(state["sched_d"])
        self.scaler_g.load_state_dict(state["scaler_g"])
        self.scaler_d.load_state_dict(state["scaler_d"])
        rank_states = state["rank_states"]
        if len(rank_states) == self.world_size:
            mine = rank_states[self.env.rank]
            restore_rng_state(mine["rng"])
            self.data.load_state_dict(mine["data"])
        else:
            # Another world size: the data split differs anyway; continue at the same epoch.
            print0(
                f"resuming {len(rank_states)}-rank checkpoint on {self.world_size} ranks: "
                "data order and RNG streams are not continued exactly"
            )
            self.data.set_epoch(rank_states[0]["data"]["epoch"] + 1)
            seed_everything(self.tc.seed + 1000 * self.env.rank + ref.step)
        self.step = int(state["step"])
        self._resumed_run_id = state.get("mlflow_run_id")
        print0(f"resumed from {ref.location} at step {self.step}")
        return self.step
