"""``ffjobs bench train``: training throughput, MFU and exposed communication, measured for real.

One call runs a short training (warm-up steps, then timed steps) on N local ranks and reports:

* images/s, global and per GPU, over the timed steps (device synchronised at both ends);
* MFU = FLOPs per training image (``torch.utils.flop_counter``) x images/s per GPU / peak,
  against the configured peak *and* against a peak measured in the same call (a bf16
  8192^3 matmul loop on GPU; an fp32 1024^3 matmul loop on CPU);
* the step split: data wait, compute, exposed communication (see :mod:`ffjobs.train.metrics`);
* with more than one rank, a cross-check of exposed communication: the same steps again with
  gradient all-reduce skipped (``no_sync``); the difference in step time is what communication
  costs the critical path.

Data: ``memory`` (default) feeds random tensors so image decoding is excluded; ``dataset``
reads the configured (synthetic) dataset through the real loader.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from typing import TYPE_CHECKING, Any

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.errors import ExitCode

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


def bench_rank(
    trainer: Any, warmup: int = 5, steps: int = 20, measure_peak: bool = True, comm_ab: bool = True
) -> dict[str, Any]:
    """Run on every rank inside a worker; returns the report (complete on rank 0)."""
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
    parser.set_defaults(handler=_bench_train)


def _bench_train(args: argparse.Namespace) -> int:
    import torch

    from ffjobs.errors import UserError
    from ffjobs.train.launch import LaunchFailed, launch_local

    if args.nproc < 1 or args.steps < 1 or args.warmup < 0:
        raise UserError("--nproc and --steps must be >= 1, --warmup >= 0")
    if args.config is None:
        args.config = "train-256" if torch.cuda.is_available() else "local"
    if torch.cuda.is_available() and args.nproc > torch.cuda.device_count():
        raise UserError(f"--nproc {args.nproc}: only {torch.cuda.device_count()} GPU(s) visible")
    config = config_from_args(args)
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
    }
    started = datetime.datetime.now(datetime.UTC)
    try:
        report = launch_local(
            config, args.nproc, mode="bench", data=args.data, bench=bench, quiet_stdout=True
        )
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
    if args.json:
        print_json(report)
    else:
        _print_human(report)
    return ExitCode.OK


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
