"""The face-fusion training loop of one rank, top to bottom: setup, one step, the loop, checkpoints.

One optimizer step (``train_step``), per micro-batch of each rank:

1. source identity embedding (frozen encoder, no grad);
2. ``fused = G(target, embedding)``;
3. discriminator loss on real targets and detached fused images;
4. generator loss through D's plain module, outside DDP (its weights frozen for this pass, so
   D's DDP does not see a second backward);
5. backward of the discriminator loss into D, then of the generator loss into G;

with ``train.compile`` the frozen identity encoder is compiled too, on its own; that
plain-module pass of D is not (compiled, it steered G's identity loss away from eager's and
fp32's over a run: dev/README.md, numerics).

then both networks step (a simultaneous update: both losses see the same D weights, which
keeps one step on a global batch equal to gradient accumulation or more ranks). All but the
last micro-batch run under ``no_sync`` so gradients are all-reduced once per step.

Each trained network is a :class:`~ffjobs.train.network.Network` (module, DDP/compiled
wrapper, optimizer, LR schedule, loss scaler); DDP wrapping lives in :mod:`ffjobs.train.ddp`,
kernel flags and seeding in :mod:`ffjobs.train.runtime`, the signal-driven stop in
:mod:`ffjobs.train.stop`.

Exact resume: the checkpoint holds both networks, EMA, optimizers, schedulers, scalers, the
step, the data position and every rank's RNG states; with deterministic kernels and the same
world size a restarted run continues bit for bit.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import record_function

from ffjobs.config import Config, config_from_dict
from ffjobs.data.dataset import to_model_images
from ffjobs.errors import UserError
from ffjobs.models import FusionModels, build
from ffjobs.models.losses import PAIR_KIND_SUMS, discriminator_loss, generator_loss
from ffjobs.slurm.progress import ProgressRecord
from ffjobs.tracking.mlflow_logger import RunLogger
from ffjobs.train import ddp
from ffjobs.train.checkpoint import capture_rng_state, open_checkpoints, restore_rng_state
from ffjobs.train.compile.step import StepCompilation
from ffjobs.train.data import BatchStream
from ffjobs.train.distributed import DistEnv, print0
from ffjobs.train.ema import GeneratorEMA
from ffjobs.train.faults import FaultInjector
from ffjobs.train.metrics import CommTimer, ThroughputMeter, format_progress, synchronize
from ffjobs.train.network import Network, build_network
from ffjobs.train.prefetch import DevicePrefetcher
from ffjobs.train.runtime import configure_backends, seed_everything
from ffjobs.train.stop import StopRequest

if TYPE_CHECKING:
    from ffjobs.train.probe import TrainingProbe

LOSS_NAMES = ("d_real", "d_fused", "adversarial", "identity", "reconstruction", "feature_matching")
SUMMED = (*LOSS_NAMES, *PAIR_KIND_SUMS)
"""What a step reports and the log window adds up: the losses, and the identity term's sums
and counts by pair kind (reported as ``identity_cross`` and ``identity_same``)."""


@dataclass
class TrainResult:
    """What a finished (or stopped) training run reports."""

    start_step: int
    final_step: int
    stopped_early: bool = False
    requeue: bool = False
    """Stopped ahead of a pre-emption or the time limit (USR1/USR2): the job is to go on from
    the checkpoint. False for a cancel (SIGTERM): the job stops there."""
    last_checkpoint: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)


class Trainer:
    """Owns the networks, data stream and checkpointer of one rank."""

    def __init__(
        self,
        config: Config,
        env: DistEnv,
        device: torch.device,
        dataset: torch.utils.data.Dataset,
        *,
        checkpoint_dir: str | None = None,
        models: FusionModels | None = None,
        logger: RunLogger | None = None,
        flops_per_image: float | None = None,
        signing_key: bytes | None = None,
        probe: TrainingProbe | None = None,
    ):
        """``signing_key``: the run's key (:mod:`ffjobs.train.compile.signing`) that the compile cache
        in the checkpoint store is signed and checked with; without one that cache is neither
        read nor written (the job compiles cold). ``probe``: rank 0's measurement on the
        held-out set every ``evaluate.every_steps`` (:mod:`ffjobs.train.probe`)."""
        self.created = time.perf_counter()  # time to the first step counts from here
        self.config, self.env, self.device = config, env, device
        tc = self.tc = config.train
        self.world_size = env.world_size
        configure_backends(tc.deterministic, device, tc.cudnn_benchmark)

        # Same seed on every rank for identical initial weights (DDP also broadcasts rank 0's).
        seed_everything(tc.seed)
        if models is None:
            # initialised where they train: drawing the 100 M-odd initial weights on the host
            # (one thread) costs every start, restarts included; on a GPU the values come from
            # the device's generator (DDP still broadcasts rank 0's)
            with device:
                models = build(config.model)
        self.memory_format = torch.channels_last if tc.channels_last else torch.contiguous_format
        generator = models.generator.to(device, memory_format=self.memory_format)
        discriminator = models.discriminator.to(device, memory_format=self.memory_format)
        self.identity_encoder = models.identity_encoder.to(device, memory_format=self.memory_format)
        self.identity_encoder.requires_grad_(False).eval()
        # From here on each rank draws its own random stream (data order comes from the sampler).
        seed_everything(tc.seed + 1000 * env.rank)

        self.ema = GeneratorEMA(generator, tc.ema_decay) if tc.ema_decay is not None else None
        # a run's own folder (<train.checkpoint_dir>/<run key>) when the caller names one
        self.checkpointer = open_checkpoints(config, checkpoint_dir or tc.checkpoint_dir)
        # drills record having fired next to the checkpoints, so a restarted job is not hit again
        self.faults = FaultInjector(tc.faults, env.rank, self.checkpointer.store)
        # the step's compilation and the run's compile cache around it
        self.compilation = StepCompilation(
            config, self.checkpointer.store, env.rank, device, signing_key
        )
        self.compile_mode = self.compilation.mode
        self.first_step_s: float | None = None
        self.progress = ProgressRecord.for_rank(env.rank)  # what the supervisor reads
        self.comm = CommTimer(device)
        self.generator = self._network("generator", generator, tc.lr)
        self.discriminator = self._network("discriminator", discriminator, tc.lr_discriminator)
        self.networks: tuple[Network, ...] = (self.generator, self.discriminator)
        # the frozen encoder runs outside DDP, compiled on its own (eager, its normalisation
        # and activation kernels ran one pass each, launched one by one from the host). D's
        # pass for G's loss stays eager: compiled, each step matched eager's to bf16 rounding,
        # yet over a run G's identity loss settled below eager bf16's and fp32's at every seed
        # (leaving only this pass eager removed it; dev/README.md, numerics)
        self.identity = ddp.compiled("identity_encoder", self.identity_encoder, self.compile_mode)
        self.frozen_discriminator = discriminator
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(tc.precision)
        # what a restarted job loads instead of tracing (ffjobs.train.compile.regions), in the
        # order a step first calls them
        self.compilation.offer(
            [self.identity, *(net.wrapped for net in self.networks)], self._autocast
        )

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
        # attached to the run's MLflow run by its owner (rank 0 only); never started or ended here
        self.logger = logger if logger is not None else RunLogger(config.tracking, None, None)
        self.meter = ThroughputMeter(device, self.comm)
        self.flops_per_image = flops_per_image
        self.probe = probe
        self.step = 0
        self.stop = StopRequest(env.rank)
        self.init_s = time.perf_counter() - self.created  # the rest of first_step_s is the step

    @property
    def g_module(self) -> nn.Module:
        """The plain generator (no DDP or compile wrapper)."""
        return self.generator.module

    @property
    def d_module(self) -> nn.Module:
        """The plain discriminator (no DDP or compile wrapper)."""
        return self.discriminator.module

    def _network(self, name: str, module: nn.Module, lr: float) -> Network:
        """``module`` with its optimizer, in DDP with our timing comm hook (plus the fault
        drill), optionally compiled."""
        wrapped = ddp.wrap(
            name,
            module,
            self.device,
            world_size=self.world_size,
            bucket_cap_mb=self.tc.bucket_cap_mb,
            comm_hook=self.faults.wrap_comm_hook(self.comm.hook),
            compile_mode=self.compile_mode,
        )
        return build_network(name, module, wrapped, lr, self.tc, self.device)

    # ----------------------------------------------------------------------------- one step

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """One optimizer step of G and D over ``micro_batches``; returns detached mean losses."""
        accum = len(micro_batches)
        if self.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # last step's graph outputs are dead
        for net in self.networks:
            net.zero_grad()
        totals = {name: torch.zeros((), device=self.device) for name in SUMMED}
        for index, batch in enumerate(micro_batches):
            sync = index == accum - 1  # all-reduce once, in the last micro-batch's backward
            with contextlib.nullcontext() if sync else self._no_sync():
                losses = self._forward_backward(batch, accum)
            for name in SUMMED:
                totals[name] += losses[name].detach().float() / accum

        with record_function("ffjobs.optimizer"):
            self.discriminator.step(self.tc.grad_clip)
            self.generator.step(self.tc.grad_clip)
        if self.ema is not None:
            with record_function("ffjobs.ema"):
                self.ema.update(self.g_module)
        return totals

    def _forward_backward(
        self, batch: dict[str, torch.Tensor], accum: int
    ) -> dict[str, torch.Tensor]:
        """Steps 1-5 of the module docstring on one micro-batch; returns its losses."""
        g, d = self.generator, self.discriminator
        source, target, same_identity = self._to_device(batch)
        # named ranges: what the profile (ffjobs bench train --profile) attributes time to
        with self._autocast():
            with torch.no_grad(), record_function("ffjobs.identity_source"):
                source_embedding = self.identity(source)
            with record_function("ffjobs.generator_forward"):
                fused = g.wrapped(target, source_embedding)
            with record_function("ffjobs.discriminator_forward"):
                disc_real = d.wrapped(target)
                d_losses = discriminator_loss(
                    disc_real=disc_real, disc_fused=d.wrapped(fused.detach())
                )
        # G's loss before D's backward: D's weights have no .grad yet when a compiled pass
        # through them is first captured, and a capture that guards a .grad does not load
        # (ffjobs.train.compile.regions); both losses see the same weights either way
        d.module.requires_grad_(False)  # G's loss flows through D, not into it
        with self._autocast(), record_function("ffjobs.generator_loss_forward"):
            g_losses = generator_loss(
                fused=fused,
                target=target,
                same_identity=same_identity,
                source_embedding=source_embedding,
                fused_embedding=self.identity(fused),
                disc_fused=self.frozen_discriminator(fused),
                disc_real=disc_real,
                weights=self.config.model.losses,
            )
        d.module.requires_grad_(True)
        with self.comm.backward(), record_function("ffjobs.discriminator_backward"):
            d.backward(d_losses["total"] / accum)
        with self.comm.backward(), record_function("ffjobs.generator_backward"):
            g.backward(g_losses["total"] / accum)
        return {**g_losses, **d_losses}

    def _no_sync(self) -> contextlib.AbstractContextManager:
        return ddp.no_sync(*(net.wrapped for net in self.networks))

    def _to_device(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """``uint8`` images to the model's float [-1, 1] (on the device, in its memory format)."""

        def images(x: torch.Tensor) -> torch.Tensor:
            return to_model_images(x, self.device, self.memory_format)

        same = batch["same_identity"].to(self.device, non_blocking=True)
        return images(batch["source"]), images(batch["target"]), same

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # ----------------------------------------------------------------------------- the loop

    def train(self) -> TrainResult:
        """Resume if a verified checkpoint exists, then train to ``train.steps``."""
        start = self.resume() if self.tc.resume else 0
        result = TrainResult(start_step=start, final_step=start)
        self.stop.install()
        self.logger.set_tags({"ffjobs.resumed_from_step": str(start)} if start else {})
        try:
            for _ in self.run_steps(self.tc.steps - start, result):
                pass
        finally:
            try:
                with self.stop.busy():  # the last checkpoint is complete before the job ends
                    self.checkpointer.close()
            finally:
                self.stop.uninstall()
        return result

    def run_steps(self, count: int, result: TrainResult | None = None) -> Iterator[int]:
        """Run ``count`` optimizer steps, logging and checkpointing on schedule; yields steps."""
        result = result if result is not None else TrainResult(self.step, self.step)
        self.meter.reset()
        window_losses = {name: torch.zeros((), device=self.device) for name in SUMMED}
        window_steps = 0
        global_batch = self.tc.batch_size * self.tc.grad_accum * self.world_size
        for _ in range(count):
            step = self.step + 1
            self.stop.step_started()
            self.faults.before_step(step, lambda: self.stop.requested)
            with self.meter.data_wait(), record_function("ffjobs.data_wait"):
                micro_batches = [self.data.next() for _ in range(self.tc.grad_accum)]
            losses = self.train_step(micro_batches)
            self.step = step
            self.meter.step_done(global_batch)
            if self.first_step_s is None:
                self._first_step_done(step)
            for name in SUMMED:
                window_losses[name] += losses[name]
            window_steps += 1

            last = step == self.tc.steps
            if step % self.tc.log_every == 0 or last:
                metrics = self._report(step, window_losses, window_steps)
                self.progress.reached(step, time.time())
                result.history.append(metrics)
                window_losses = {k: torch.zeros_like(v) for k, v in window_losses.items()}
                window_steps = 0
                self.stop.agree(self.device, self.world_size)
            if self.probe is not None and self.probe.due(step):
                with self.meter.excluded(), record_function("ffjobs.probe"):
                    self.measure_held_out(step)
            if step % self.tc.checkpoint_every == 0 or last or self.stop.requested:
                with self.meter.excluded(), self.stop.busy():
                    result.last_checkpoint = self.save() or result.last_checkpoint
            result.final_step = step
            yield step
            if self.stop.requested:
                why = "pre-emption or time limit" if self.stop.requeue else "cancel"
                print0(f"stop requested ({why}): checkpoint written at step {step}, exiting")
                result.stopped_early, result.requeue = True, self.stop.requeue
                return

    def _report(self, step: int, losses: dict[str, torch.Tensor], steps: int) -> dict[str, float]:
        stats = self.meter.window()
        stacked = torch.stack([losses[name] for name in SUMMED]) / max(steps, 1)
        if self.world_size > 1:
            dist.all_reduce(stacked)
            stacked /= self.world_size
        window = dict(zip(SUMMED, stacked.tolist(), strict=True))
        metrics: dict[str, float] = {"step": float(step)}
        metrics.update(stats.as_dict(self.world_size, self.flops_per_image, self.tc.peak_flops))
        metrics.update({f"loss/{name}": window[name] for name in LOSS_NAMES})
        for kind in ("cross", "same"):  # a ratio: the window's and ranks' averaging cancels
            if window[f"{kind}_pairs"] > 0:
                pairs = window[f"{kind}_pairs"]
                metrics[f"loss/identity_{kind}"] = window[f"identity_{kind}_sum"] / pairs
        metrics["lr"] = self.generator.scheduler.get_last_lr()[0]
        if self.env.rank == 0:
            if self.tc.progress:
                print(format_progress(step, self.tc.steps, metrics), flush=True)
            # MLflow names without "/" (loss_identity): the UI groups "/" names into sections
            tracked = {k.replace("/", "_"): v for k, v in metrics.items() if k != "step"}
            self.logger.log_metrics(tracked, step)
        return metrics

    def measure_held_out(self, step: int) -> None:
        """The probe's measurement of the weights a checkpoint hands on, logged at ``step``."""
        assert self.probe is not None
        weights = self.ema.module if self.ema is not None else self.g_module
        metrics = self.probe.measure(weights, self.identity_encoder)
        if metrics:
            print0(self.probe.line(step, metrics))
            self.logger.log_metrics(metrics, step)

    # ----------------------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything shared by all ranks (rank 0's copy is the truth after DDP sync)."""
        return {
            # plain module weights under each network's name: they load into a bare model
            **{net.name: net.module.state_dict() for net in self.networks},
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "optimizer_state": {net.name: net.optimizer_state() for net in self.networks},
            "world_size": self.world_size,
            "config": self.config.to_dict(),
        }

    def rank_state(self) -> dict[str, Any]:
        return {"rng": capture_rng_state(), "data": self.data.state_dict()}

    def save(self) -> str | None:
        """Collective checkpoint of the current step; returns its location on rank 0.

        With ``train.async_checkpoint`` the file is written in the background and verified
        once its manifest is; ``checkpoint_blocked_s`` is what training waited either way.
        """
        store = self.checkpointer.store
        location = self.checkpointer.save(
            self.step,
            self.state_dict(),
            self.rank_state(),
            asynchronous=self.tc.async_checkpoint,
            on_written=lambda name: self.faults.after_checkpoint(store, name),
        )
        if location is not None:
            blocked = self.checkpointer.timings[-1].blocked_s
            mode = "writing in the background" if self.tc.async_checkpoint else "written"
            print0(f"checkpoint step {self.step} -> {location} ({mode}; blocked {blocked:.2f} s)")
            self.logger.log_metrics({"checkpoint_blocked_s": blocked}, self.step)
        return location

    def _first_step_done(self, step: int) -> None:
        """Report time to the first step (compilation included); publish the compile cache."""
        synchronize(self.device)
        self.first_step_s = time.perf_counter() - self.created
        with self.meter.excluded():
            self.compilation.first_step_done()
        if self.env.rank == 0:
            done_at = time.time()  # when a recovery ends, for the supervisor and the bench
            self.progress.first_step(step - 1, done_at)
            print0(
                f"first step {step} done at {done_at:.3f} (started from step {step - 1}), "
                f"{self.first_step_s:.1f} s after start ({self.compilation.summary()})"
            )
            self.logger.log_metrics({"first_step_s": self.first_step_s}, step)

    def resume(self) -> int:
        """Load the newest verified checkpoint that loads safely, if there is one; return the
        step it is at."""
        found = self.checkpointer.load_latest()
        if found is None:
            return 0
        ref, state = found
        if "optimizer_state" not in state:
            raise UserError(
                f"{ref.location}: older checkpoint layout (no 'optimizer_state' key); resume it "
                "with the ffjobs release that wrote it, or train into a new train.checkpoint_dir"
            )
        # the config's learning rates and Adam settings, not those the optimizer state was
        # saved with: a run resumed with another train.lr trains with it from here
        lrs = {"generator": self.tc.lr, "discriminator": self.tc.lr_discriminator}
        for net in self.networks:
            net.module.load_state_dict(state[net.name])
            net.load_optimizer_state(state["optimizer_state"][net.name])
            net.apply_config(lrs[net.name], self.tc)
        if self.ema is not None and state["ema"] is not None:
            self.ema.load_state_dict(state["ema"])
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
        print0(f"resumed from {ref.location} at step {self.step}")
        changed = _changed_since(state.get("config"), self.config)
        if changed:
            print0(
                f"config changed since this checkpoint, in effect from step {self.step}: {changed}"
            )
        return self.step


def _changed_since(saved: dict[str, Any] | None, config: Config) -> str:
    """The fields of ``config`` that differ from the ``saved`` config of a checkpoint, as
    ``a.b, c.d`` (names only: values may be secrets); empty when none or unknown."""
    from ffjobs.runs.resume_rules import config_fields

    if not saved:
        return ""
    try:
        before = config_fields(config_from_dict(saved, source="the checkpoint's config"))
    except UserError:  # written by another ffjobs version: nothing to compare
        return ""
    now = config_fields(config)
    return ", ".join(key for key in now if before.get(key) != now[key])
