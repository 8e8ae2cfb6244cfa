"""What ``ffjobs bench train`` measures on every rank, inside a training worker.

:func:`bench_rank` runs the timed steps and returns the report (complete on rank 0): images/s,
MFU against the configured and a measured peak (:func:`measure_peak_flops`), the step split,
exposed communication (with and without the gradient all-reduce), time to the first step and
checkpoint cost (:func:`measure_checkpoint_cost`). The command that launches the ranks and
prints the report is :mod:`ffjobs.bench.train`.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where used
    import torch


def measure_peak_flops(device: torch.device, seconds: float = 3.0) -> dict[str, Any]:
    """Dense matmul FLOP/s of this device: bf16 8192^3 on GPU, fp32 1024^3 on CPU."""
    import torch

    if device.type == "cuda":
        n, dtype = 8192, torch.bfloat16
    else:
        n, dtype = 1024, torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ b
        iters += 10
        _sync(device)
    elapsed = time.perf_counter() - start
    return {"flops": 2 * n**3 * iters / elapsed, "matmul": f"{n}^3 {str(dtype)[6:]}"}


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


CHECKPOINT_ROUNDS = 3
"""Asynchronous saves measured one after the other: the cost beside a write varies from save to
save with what else the host does, so the share is their mean, and each is reported."""


def measure_checkpoint_cost(trainer: Any, interval: int, steps_during_write: int) -> dict:
    """Blocked time of a synchronous save and of :data:`CHECKPOINT_ROUNDS` asynchronous ones,
    each followed by the steps that run beside its background write.

    The blocked share of training at ``interval`` counts an asynchronous save's blocked time
    plus what the steps run during its write lost against the timed steps, averaged over the
    rounds. A first asynchronous save before them also allocates the reusable shared, pinned
    buffer and starts the writer process; it is reported apart.

    The saves go to a folder of their own beside the run's checkpoints (the same storage),
    removed afterwards: pointed at a real run's folder, the bench neither adds checkpoints a
    resume would pick up nor prunes the run's own.
    """
    from ffjobs.train.checkpoint import open_checkpoints

    folder = f"{trainer.checkpointer.location.rstrip('/')}/bench-checkpoint-cost-{os.getpid()}"
    ckpt = open_checkpoints(trainer.config, folder)
    try:
        return _checkpoint_cost(trainer, ckpt, interval, steps_during_write)
    finally:
        ckpt.close()
        if "://" in folder:
            for name in ckpt.store.list():
                ckpt.store.delete(name)
        else:
            shutil.rmtree(folder, ignore_errors=True)  # the writer's temporaries with the rest


def _checkpoint_cost(trainer: Any, ckpt: Any, interval: int, steps_during_write: int) -> dict:
    from ffjobs.train.checkpoint import data_name

    step_time = trainer.meter.window().step_time_s
    ckpt.save(trainer.step, trainer.state_dict(), trainer.rank_state())
    sync = ckpt.timings[-1] if ckpt.timings else None
    size = ckpt.store.size(data_name(trainer.step)) if sync is not None else None
    ckpt.save(trainer.step, trainer.state_dict(), trainer.rank_state(), asynchronous=True)
    first_background = ckpt.timings[-1] if ckpt.timings else None
    ckpt.wait()
    # enough steps to cover the whole write, the same number on every rank: the writer does the
    # synchronous save's work, so its time with half again as margin (outlasted says if not)
    estimate = _from_rank0(1.5 * sync.write_s if sync is not None and sync.write_s else None)
    beside = max(steps_during_write, math.ceil((estimate or 0.0) / step_time) + 1)
    rounds, outlasted = [], False
    for _ in range(CHECKPOINT_ROUNDS):
        ckpt.save(trainer.step, trainer.state_dict(), trainer.rank_state(), asynchronous=True)
        background = ckpt.timings[-1] if ckpt.timings else None
        list(trainer.run_steps(beside))
        during = trainer.meter.window().step_time_s
        outlasted = outlasted or ckpt.writing  # the write outlived the steps: cost missed
        ckpt.wait()
        if background is not None:
            rounds.append(
                {
                    "blocked_s": background.blocked_s,
                    "write_s": background.write_s,
                    "step_time_during_write_s": during,
                    "lost_s": background.blocked_s + max(during - step_time, 0.0) * beside,
                }
            )
    if sync is None or not rounds or first_background is None:  # ranks other than 0 write nothing
        return {}

    def mean(key: str) -> float:
        return sum(r[key] or 0.0 for r in rounds) / len(rounds)

    lost = mean("lost_s")
    chosen = lost if trainer.tc.async_checkpoint else sync.blocked_s
    return {
        "checkpoint_sync_blocked_s": sync.blocked_s,
        "checkpoint_async_blocked_s": mean("blocked_s"),
        "checkpoint_async_first_blocked_s": first_background.blocked_s,
        "checkpoint_async_write_s": mean("write_s"),
        "step_time_during_write_s": mean("step_time_during_write_s"),
        "steps_during_write": beside,
        "checkpoint_write_outlasted_steps": outlasted,
        "checkpoint_async_lost_s": lost,
        "checkpoint_async_rounds": rounds,
        "checkpoint_bytes": size,
        "checkpoint_interval": interval,
        "checkpoint_async": trainer.tc.async_checkpoint,
        "checkpoint_blocked_s": chosen,
        "checkpoint_blocked_fraction": chosen / (interval * step_time + chosen),
    }


def _from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def bench_rank(
    trainer: Any,
    warmup: int = 5,
    steps: int = 20,
    measure_peak: bool = True,
    comm_ab: bool = True,
    checkpoint_interval: int | None = None,
    profile_dir: str | None = None,
    profile_steps: int = 5,
) -> dict[str, Any]:
    """Run on every rank inside a worker; returns the report (complete on rank 0).

    ``checkpoint_interval``: the preset's ``train.checkpoint_every``, to measure checkpoint
    cost against (``None``: not measured). ``profile_dir``: rank 0 also profiles
    ``profile_steps`` steps after the timed ones (:mod:`ffjobs.train.profile`) into it.
    """
    import torch

    from ffjobs.train.checkpoint import gather_to_rank0
    from ffjobs.train.ddp import no_sync
    from ffjobs.train.distributed import barrier

    device, world = trainer.device, trainer.world_size
    peaks = gather_to_rank0(measure_peak_flops(device) if measure_peak else None)
    barrier()
    list(trainer.run_steps(warmup))
    list(trainer.run_steps(steps))
    synced = trainer.meter.window()
    report: dict[str, Any] = synced.as_dict(world, trainer.flops_per_image, trainer.tc.peak_flops)
    report["mfu_vs_configured_peak"] = report.pop("mfu", None)
    if measure_peak and trainer.flops_per_image:
        measured = min(p["flops"] for p in peaks)
        report["measured_peak_flops"] = measured
        report["measured_peak_per_rank"] = [p["flops"] for p in peaks]
        report["peak_matmul"] = peaks[0]["matmul"]
        report["mfu_vs_measured_peak"] = (
            trainer.flops_per_image * report["images_per_s_per_gpu"] / measured
        )
    if comm_ab and world > 1:
        # every backward accumulates locally: the same steps, minus the gradient all-reduce
        with no_sync(*(net.wrapped for net in trainer.networks)):
            list(trainer.run_steps(max(warmup // 2, 1)))
            list(trainer.run_steps(steps))
            unsynced = trainer.meter.window()
        report["step_time_no_allreduce_s"] = unsynced.step_time_s
        report["exposed_comm_fraction_ab"] = (
            max(synced.step_time_s - unsynced.step_time_s, 0.0) / synced.step_time_s
        )
    if profile_dir is not None and trainer.env.rank == 0:
        from ffjobs.train.profile import profile_steps as profile

        report.update(profile(trainer, profile_steps, profile_dir))
    barrier()
    if checkpoint_interval is not None:
        list(trainer.run_steps(steps))  # the reference step time right before the saves
        report.update(measure_checkpoint_cost(trainer, checkpoint_interval, max(steps // 2, 1)))
    cache = trainer.compilation.report
    report.update(
        first_step_s=trainer.first_step_s,
        process_start_s=_process_start_s(trainer.created),
        trainer_init_s=trainer.init_s,
        compile_cache_loaded_entries=cache.loaded_entries,
        compile_cache_saved_entries=cache.saved_entries,
        compile_cache_bytes=cache.loaded_bytes or cache.saved_bytes,
    )
    tc, mc = trainer.tc, trainer.config.model
    report.update(
        world_size=world,
        backend=str(torch.distributed.get_backend()) if world > 1 else "none",
        device=torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        per_gpu_batch=tc.batch_size * tc.grad_accum,
        global_batch=tc.batch_size * tc.grad_accum * world,
        resolution=mc.resolution,
        precision=tc.precision,
        channels_last=tc.channels_last,
        compile=tc.compile,
        compile_mode=trainer.compile_mode,
        fused_adam=tc.fused_adam,
        flops_per_image=trainer.flops_per_image,
        configured_peak_flops=tc.peak_flops,
        warmup_steps=warmup,
        timed_steps=steps,
        torch=torch.__version__,
        max_memory_gib=torch.cuda.max_memory_allocated(device) / 2**30
        if device.type == "cuda"
        else None,
    )
    return report


def _process_start_s(trainer_created: float) -> float | None:
    """Seconds from this process's start to the trainer's (interpreter, imports, CUDA and
    process-group init, the data set): what ``first_step_s`` does not count. Linux only."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    return age - (time.perf_counter() - trainer_created)
