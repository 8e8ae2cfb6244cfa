"""``ffjobs bench train``: training throughput, MFU and exposed communication, measured for real.

One call runs a short training (warm-up steps, then timed steps) on N local ranks and reports:

* images/s, global and per GPU, over the timed steps (device synchronised at both ends);
* MFU = FLOPs per training image (``torch.utils.flop_counter``) x images/s per GPU / peak,
  against the configured peak *and* against a peak measured in the same call (a bf16
  8192^3 matmul loop on GPU; an fp32 1024^3 matmul loop on CPU);
* the step split: data wait, compute, exposed communication (see :mod:`ffjobs.train.metrics`);
* with more than one rank, a cross-check of exposed communication: the same steps again with
  gradient all-reduce skipped (``no_sync``); the difference in step time is what communication
  costs the critical path;
* time to the first step (``first_step_s``: trainer construction to the first finished step,
  compilation included) and what the compile cache in the checkpoint folder gave;
* checkpoint cost: one synchronous and three asynchronous saves of the real training state,
  the steps run while each asynchronous write is in flight, and the share of training time
  blocked at the preset's ``train.checkpoint_every`` (their mean);
* with ``--baseline plain``, the same measurement of the plain path (fp32, contiguous, eager,
  unfused Adam, synchronous checkpoints) in the same call, under ``baseline``, and a last line
  of ratios.

Each launch gets an empty local compiler cache (at one path for every launch on the same
``--checkpoint-dir``), so a compiled run is warm only through the compile cache in its
``--checkpoint-dir`` (what a restarted job on a fresh node finds).

Data: ``memory`` (default) feeds random tensors so image decoding is excluded; ``dataset``
reads the configured (synthetic) dataset through the real loader.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import hashlib
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.errors import ExitCode
from ffjobs.train.compile_cache import local_caches_root

if TYPE_CHECKING:  # torch is imported where used: building the CLI must stay light
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
    ``profile_steps`` steps after the timed ones (:mod:`ffjobs.bench.profile`) into it.
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
        from ffjobs.bench.profile import profile_steps as profile

        report.update(profile(trainer, profile_steps, profile_dir))
    barrier()
    if checkpoint_interval is not None:
        list(trainer.run_steps(steps))  # the reference step time right before the saves
        report.update(measure_checkpoint_cost(trainer, checkpoint_interval, max(steps // 2, 1)))
    cache = trainer.compile_cache
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


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``train`` to the ``ffjobs bench`` sub-commands."""
    parser = subparsers.add_parser(
        "train", help="training throughput, MFU and exposed communication on N local ranks"
    )
    add_config_arguments(parser)
    add_json_argument(parser)
    parser.add_argument("--nproc", type=int, default=1, metavar="N")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    parser.add_argument(
        "--data",
        choices=("memory", "dataset"),
        default="memory",
        help="memory: random tensors (no decoding); dataset: data.source",
    )
    parser.add_argument("--no-peak", action="store_true", help="skip the matmul peak measurement")
    parser.add_argument(
        "--no-comm-ab", action="store_true", help="skip the re-run without all-reduce"
    )
    parser.add_argument(
        "--no-checkpoint", action="store_true", help="skip the checkpoint cost measurement"
    )
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="checkpoint folder (and compile cache) to use; the same DIR again compiles warm "
        "(default: a new temporary folder, removed afterwards)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="also profile a few steps after the timed ones (torch.profiler): kernel table by "
        "self device time, named phases, trace; the plain baseline's into DIR/plain",
    )
    parser.add_argument("--profile-steps", type=int, default=5, metavar="N")
    parser.add_argument(
        "--baseline",
        choices=("none", "plain"),
        default="none",
        help="plain: also measure fp32, contiguous, eager, unfused Adam, sync checkpoints",
    )
    parser.set_defaults(handler=_bench_train)


def _bench_train(args: argparse.Namespace) -> int:
    import torch

    from ffjobs.errors import UserError
    from ffjobs.train.launch import LaunchFailed

    if args.nproc < 1 or args.steps < 1 or args.warmup < 0 or args.profile_steps < 1:
        raise UserError("--nproc, --steps and --profile-steps must be >= 1, --warmup >= 0")
    if args.config is None:
        args.config = "train-256" if torch.cuda.is_available() else "local"
    if torch.cuda.is_available() and args.nproc > torch.cuda.device_count():
        raise UserError(f"--nproc {args.nproc}: only {torch.cuda.device_count()} GPU(s) visible")
    config = config_from_args(args)
    interval = config.train.checkpoint_every  # checkpoint cost is measured against it
    # a benchmark neither resumes, checkpoints nor tracks: it must measure the same work each time
    config.train.resume = False
    config.train.checkpoint_every = 10**9
    config.train.steps = 10**9
    config.train.log_every = 10**9
    config.train.progress = False
    config.tracking.enabled = False
    if args.data == "dataset":
        from ffjobs.models.prepare import ensure_demo_inputs

        ensure_demo_inputs(config)
    bench = {
        "warmup": args.warmup,
        "steps": args.steps,
        "measure_peak": not args.no_peak,
        "comm_ab": not args.no_comm_ab,
        "checkpoint_interval": None if args.no_checkpoint else interval,
        "profile_dir": str(Path(args.profile).resolve()) if args.profile else None,
        "profile_steps": args.profile_steps,
    }
    started = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="ffjobs-bench-") as scratch:
        config.train.checkpoint_dir = args.checkpoint_dir or str(Path(scratch) / "checkpoints")
        try:
            report = _launch(config, args, bench, run_compiler_cache(config.train.checkpoint_dir))
            if args.baseline == "plain":
                plain = plain_path(config, str(Path(scratch) / "plain-checkpoints"))
                plain_bench = dict(bench)
                if args.profile:
                    plain_bench["profile_dir"] = str(Path(args.profile).resolve() / "plain")
                report["baseline"] = _launch(
                    plain, args, plain_bench, Path(scratch) / "plain-cache"
                )
                report["baseline"]["name"] = "plain"
        except LaunchFailed as exc:
            print(f"ffjobs: bench train failed: {exc}", file=sys.stderr)
            return ExitCode.FAILED
    report.update(
        preset=args.config,
        overrides=args.overrides,
        data=args.data,
        date=started.isoformat(timespec="seconds"),
        host=platform.node(),
        command="ffjobs bench train " + " ".join(sys.argv[3:]),
    )
    report["summary"] = ratio_summary(report)
    if args.json:
        print_json(report)
        print(report["summary"], file=sys.stderr)  # stdout stays one JSON document
    else:
        _print_human(report)
        if "baseline" in report:
            print("baseline (plain):")
            _print_human(report["baseline"])
        print(report["summary"])
    return ExitCode.OK


def run_compiler_cache(checkpoint_dir: str) -> Path:
    """The local compiler-cache folder of every launch on ``checkpoint_dir``: one path per run.

    One path, as a restarted job on another node finds with the trainer's default folder: the
    compile-cache blob's kernels name their files in the folder they were compiled in, and a
    warm launch in another folder would tune every kernel again (:mod:`ffjobs.train.compile_cache`).
    Under the root the trainer's default uses (node memory where it has room).
    """
    location = checkpoint_dir if "://" in checkpoint_dir else str(Path(checkpoint_dir).resolve())
    digest = hashlib.sha256(location.encode()).hexdigest()[:12]
    return Path(local_caches_root()) / f"ffjobs-bench-compiler-cache-{digest}"


def _launch(config: Any, args: argparse.Namespace, bench: dict, compiler_cache: Path) -> dict:
    """One benchmark launch, its compiler's local caches in ``compiler_cache``, emptied first
    and removed after: warm only through the compile cache in the checkpoint folder."""
    from ffjobs.train.launch import launch_local

    shutil.rmtree(compiler_cache, ignore_errors=True)
    # the ranks inherit these
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compiler_cache / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(compiler_cache / "triton")
    try:
        report = launch_local(
            config, args.nproc, mode="bench", data=args.data, bench=bench, quiet_stdout=True
        )
        # what the launch left in its local caches: the room they take on a node
        report["local_compiler_cache_mb"] = _folder_bytes(compiler_cache) / 1e6
        report["local_compiler_cache_root"] = str(compiler_cache.parent)
        return report
    finally:
        shutil.rmtree(compiler_cache, ignore_errors=True)


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def plain_path(config: Any, checkpoint_dir: str) -> Any:
    """``config`` on the plain path: fp32, contiguous, eager, unfused Adam, sync checkpoints."""
    plain = copy.deepcopy(config)
    tc = plain.train
    tc.precision, tc.channels_last, tc.compile = "fp32", False, False
    tc.fused_adam, tc.async_checkpoint = False, False
    tc.checkpoint_dir = checkpoint_dir
    return plain


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def ratio_summary(r: dict[str, Any]) -> str:
    """The one-line summary printed last: ratios against the baseline and the goals' figures."""
    parts = []
    base = r.get("baseline")
    if base and base.get("images_per_s"):
        parts.append(f"preset/plain {r['images_per_s'] / base['images_per_s']:.2f}x img/s")
    parts.append(f"MFU {_percent(r.get('mfu_vs_measured_peak'))} of measured peak")
    parts.append(f"data wait {_percent(r.get('data_wait_fraction'))}")
    parts.append(f"checkpoint blocked {_percent(r.get('checkpoint_blocked_fraction'))}")
    if r.get("first_step_s") is not None:
        warm = " (warm)" if r.get("compile_cache_loaded_entries") else ""
        parts.append(f"first step {r['first_step_s']:.1f} s{warm}")
    return "ratio: " + "; ".join(parts)


def _print_human(r: dict[str, Any]) -> None:
    print(
        f"{r['world_size']} rank(s) on {r['device']}, {r['resolution']} px, {r['precision']}, "
        f"batch {r['per_gpu_batch']}/rank"
    )
    print(f"  {r['images_per_s']:.1f} img/s total, {r['images_per_s_per_gpu']:.1f} img/s per rank")
    print(
        f"  step {r['step_time_s'] * 1000:.1f} ms = data {r['data_wait_s'] * 1000:.1f} + compute "
        f"{r['compute_s'] * 1000:.1f} + exposed comm {r['exposed_comm_s'] * 1000:.1f} ms "
        f"({r['exposed_comm_fraction'] * 100:.1f}%)"
    )
    if "exposed_comm_fraction_ab" in r:
        print(
            f"  without all-reduce: {r['step_time_no_allreduce_s'] * 1000:.1f} ms/step -> "
            f"exposed comm {r['exposed_comm_fraction_ab'] * 100:.1f}% (A/B)"
        )
    if r.get("mfu_vs_measured_peak") is not None:
        print(
            f"  MFU {r['mfu_vs_measured_peak'] * 100:.1f}% of measured peak "
            f"{r['measured_peak_flops'] / 1e12:.1f} TFLOP/s ({r['peak_matmul']})"
        )
    if r.get("mfu_vs_configured_peak") is not None:
        print(
            f"  MFU {r['mfu_vs_configured_peak'] * 100:.1f}% of configured peak "
            f"{r['configured_peak_flops'] / 1e12:.0f} TFLOP/s"
        )
