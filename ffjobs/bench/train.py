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

What runs on each rank is :mod:`ffjobs.train.measure` (the training worker calls it in bench
mode); this module launches the ranks and prints their report.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import hashlib
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.errors import ExitCode
from ffjobs.train.compile.cache import local_caches_root


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
    from ffjobs.local_ranks import LaunchFailed

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
    warm launch in another folder would tune every kernel again (:mod:`ffjobs.train.compile.cache`).
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
    # the ranks' environment only: a caller that goes on (a test, a notebook) keeps its own
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(compiler_cache / "inductor"),
        "TRITON_CACHE_DIR": str(compiler_cache / "triton"),
    }
    try:
        report = launch_local(
            config,
            args.nproc,
            mode="bench",
            data=args.data,
            bench=bench,
            quiet_stdout=True,
            env=env,
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
