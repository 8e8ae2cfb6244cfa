"""``ffjobs bench quality``: does a preset's model learn face fusion? Its held-out identity
retrieval, identity cosine and self-swap PSNR as it trains, over seeds.

For each of ``--seeds`` (``train.seed``), one process on one device (the GPU when there is one)
trains the preset for ``--steps`` at global batch ``--batch`` from a fresh start, with the
trainer's own held-out measurement (:mod:`ffjobs.train.probe`) every ``--every`` steps and once
before the first step (the generator as training starts it). Both recognisers are the ones the
pipeline uses: pre-trained on the training identities only when missing or stale
(:mod:`ffjobs.models.prepare`). Nothing is tracked in MLflow; ``--out`` gets the curves and the
last measurement of each seed, rewritten after each seed.

Everything is made under ``--workdir`` (default ``runs/bench-quality``): the preset's relative
paths (``runs/data``, ``runs/models``, ``runs/checkpoints``) point there, so a benchmark on
other synthetic data (``--set data.synth.identities=200``) never meets the demo's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from ffjobs.cli import add_config_arguments, add_json_argument, overrides_from_args
from ffjobs.errors import UserError

MEASURED = ("identity_top1", "identity_cosine", "psnr", "ssim")


class _Curve:
    """The trainer's logger: keeps the held-out measurements by step."""

    def __init__(self) -> None:
        self.points: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        kept = {
            k.removeprefix("heldout_"): v for k, v in metrics.items() if k.startswith("heldout_")
        }
        if kept:
            self.points[step] = kept

    def set_tags(self, tags: dict[str, str]) -> None:
        pass


def train_and_measure(preset: str | None, overrides: list[str], seed: int, steps: int, every: int):
    """One seed of ``preset`` (``None``: the embedded default): ``(seconds, {step: held-out
    metrics})``, step 0 the untrained generator."""
    import torch

    from ffjobs.config import load_config
    from ffjobs.models.prepare import ensure_demo_inputs
    from ffjobs.quality.encoder import ensure_evaluation_encoder
    from ffjobs.train.distributed import DistEnv
    from ffjobs.train.probe import TrainingProbe
    from ffjobs.train.trainer import Trainer
    from ffjobs.train.worker import build_train_dataset

    config = load_config(
        preset,
        [
            *overrides,
            "tracking.enabled=false",
            "train.progress=false",
            f"train.seed={seed}",
            f"train.steps={steps}",
            f"train.log_every={every}",
            f"train.checkpoint_every={steps}",
            f"train.checkpoint_dir=runs/checkpoints/bench-quality-{seed}",
            f"evaluate.every_steps={every}",
        ],
    )
    ensure_demo_inputs(config)
    ensure_evaluation_encoder(config)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    curve = _Curve()
    started = time.perf_counter()
    trainer = Trainer(
        config,
        DistEnv(0, 1, 0, "127.0.0.1", 0, "single"),
        device,
        build_train_dataset(config, "dataset", 1),
        logger=curve,
        probe=TrainingProbe(config, device),
    )
    trainer.measure_held_out(0)
    for _ in trainer.run_steps(steps):
        pass
    return time.perf_counter() - started, curve.points


def register(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "quality", help="held-out identity retrieval and PSNR of a preset's model as it trains"
    )
    add_config_arguments(parser)
    add_json_argument(parser)
    parser.add_argument("--steps", type=int, default=2000, help="steps per seed (default 2000)")
    parser.add_argument("--every", type=int, default=200, help="measure every N (default 200)")
    parser.add_argument("--batch", type=int, default=16, help="global batch (default 16)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")
    parser.add_argument("--workdir", type=Path, default=Path("runs/bench-quality"))
    parser.add_argument("--out", type=Path, help="the report, rewritten after each seed")
    parser.set_defaults(handler=_bench_quality)


def _bench_quality(args: argparse.Namespace) -> int:
    from ffjobs.cli import config_from_args, print_json
    from ffjobs.config import resolve_preset

    if args.steps < 1 or args.every < 1 or args.batch < 1:
        raise UserError("--steps, --every and --batch must be >= 1")
    overrides = [*overrides_from_args(args), f"train.batch_size={args.batch}"]
    config_from_args(args)  # a bad --config or --set stops here, before anything is made
    # found here, before the work folder becomes the working directory; None: the default
    preset = str(resolve_preset(args.config).resolve()) if args.config else None
    out = args.out.resolve() if args.out else None
    report: dict[str, Any] = {
        "config": args.config or "local",
        "set": overrides,
        "steps": args.steps,
        "seeds": {},
    }
    args.workdir.mkdir(parents=True, exist_ok=True)
    # with --json, stdout is the report alone: training's own lines go to stderr
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with contextlib.chdir(args.workdir), quiet:
        for seed in args.seeds:
            seconds, points = train_and_measure(preset, overrides, seed, args.steps, args.every)
            report["seeds"][str(seed)] = {"seconds": round(seconds, 1), "points": points}
            if out is not None:
                out.write_text(json.dumps(report, indent=1) + "\n")
            print(summary_line(seed, seconds, points), flush=True)
    if args.json:
        print_json(report)
    return 0


def summary_line(seed: int, seconds: float, points: dict[int, dict[str, float]]) -> str:
    """``seed 0 (142 s): top-1 0.013 at 0 ... 0.891 at 2000; at the end cosine 0.851, ...``"""
    curve = " ".join(f"{p['identity_top1']:.3f}@{step}" for step, p in sorted(points.items()))
    last = points[max(points)] if points else {}
    end = ", ".join(f"{name} {last[name]:.3g}" for name in MEASURED if name in last)
    return f"seed {seed} ({seconds:.0f} s): identity_top1 {curve}; at the end {end}"
