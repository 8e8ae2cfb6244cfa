"""``ffjobs bench numerics``: short runs of a preset beside bf16 eager, loss by loss: are its
numerics honest?

For each of ``--seeds`` seeds (``train.seed`` + 0, 1, ...), two launches of ``--steps`` steps on
``--data memory`` (random pairs), one rank each, from fresh checkpoint folders:

* ``preset``: as configured (on train-256: bf16, channels_last, compiled, CUDA graphs);
* ``eager``: the same with ``train.compile=false``: same seed, so the same initial weights and
  the same batches;

and ``eager 0 again``: eager at the first seed with ``train.cudnn_benchmark=false``: the same
arithmetic through cuDNN's default algorithms, so it differs from ``eager 0`` by rounding only.

A GAN's curves part within tens of steps whatever the arithmetic (Adam's first updates are
about ``lr`` times the sign of each gradient, and rounding flips the sign of small ones), so
"within noise" is judged on the window means (``train.log_every`` steps) against that:

* ``same seed``: the mean distance of preset to eager at the same seed, beside eager's to
  ``eager 0 again`` (rounding alone) and, with two seeds or more, the mean distance between
  eager runs of different seeds; within noise where it is no larger than the larger of those;
* ``level`` (two seeds or more): each run's mean over all windows; the difference of the
  preset's and eager's averages over the seeds, in standard errors (Welch's t). Within noise
  below :data:`LEVEL_T`: with three seeds each, t has about 4 degrees of freedom and its
  two-sided 5% point is 2.78. Beside it, not a verdict: the mean of the per-seed differences
  and its t (``n`` seeds, ``n - 1`` degrees of freedom), which pairing by seed makes more
  sensitive.

With ``--fp32``, each seed also gets ``fp32``: eager in fp32 (TF32 matmuls and convolutions on
CUDA, as the trainer sets them), the arithmetic both bf16 paths round. Each bf16 path's level is
then tested against fp32's (Welch's t): where the preset's level differs from eager's, this
says which of the two is nearer fp32.

``--out FILE`` is rewritten after each launch, with the comparison over the seeds whose
launches finished (what finished survives a time limit). Where FILE holds launches of the same
settings already, those are kept and not run again: a second call with the same ``--out`` goes
on where a time limit stopped the first, and one with fewer ``--seeds`` compares without
training. ``--log-every 1`` makes the first window step 1, where preset and eager share weights
and batch.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path
from typing import Any

from ffjobs.cli import add_config_arguments, add_json_argument, overrides_from_args
from ffjobs.errors import UserError

LEVEL_T = 3.0
"""Welch's t above which the preset's loss level differs from eager's (see the docstring)."""


def mean_distance(a: list[float], b: list[float]) -> float:
    """The mean absolute difference of two curves of the same windows."""
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def _t(mean: float, error: float) -> float:
    # no spread at all: zero where the means agree, else infinitely many standard errors
    if error:
        return mean / error
    return 0.0 if mean == 0 else math.copysign(math.inf, mean)


def welch_t(a: list[float], b: list[float]) -> float:
    """Welch's t of the means of two samples (two values each at least)."""
    error = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    return _t(statistics.fmean(a) - statistics.fmean(b), error)


def paired_t(ours: list[float], reference: list[float]) -> dict[str, float]:
    """The mean of the paired differences ``ours - reference`` and, from two pairs on, its t
    (``n - 1`` degrees of freedom)."""
    differences = [a - b for a, b in zip(ours, reference, strict=True)]
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return {"mean": mean}
    return {"mean": mean, "t": _t(mean, statistics.stdev(differences) / len(differences) ** 0.5)}


def launches(seeds: int, fp32: bool) -> list[tuple[str, bool, int, bool, str | None]]:
    """(name, the preset's compilation kept, seed, cuDNN benchmark, precision or None) of every
    launch, in order."""
    planned = []
    for seed in range(seeds):
        planned.append((f"preset {seed}", True, seed, True, None))
        planned.append((f"eager {seed}", False, seed, True, None))
        if seed == 0:
            planned.append(("eager 0 again", False, 0, False, None))
        if fp32:
            planned.append((f"fp32 {seed}", False, seed, True, "fp32"))
    return planned


def finished_seeds(runs: dict[str, dict]) -> int:
    """How many seeds, from the first, have both launches (and seed 0 its rerun) finished."""
    if "eager 0 again" not in runs:
        return 0
    seeds = 0
    while f"preset {seeds}" in runs and f"eager {seeds}" in runs:
        seeds += 1
    return seeds


def compare(runs: dict[str, dict], seeds: int | None = None) -> dict[str, dict]:
    """Per loss: the same-seed and the level comparison of the module docstring, over the first
    ``seeds`` seeds (default: every :func:`finished_seeds`, at least one)."""
    seeds = finished_seeds(runs) if seeds is None else seeds
    names = [k for k in runs["preset 0"] if k.startswith("loss/")]
    compared = {}
    for name in names:
        curve = {run: values[name] for run, values in runs.items()}
        same_seed = [mean_distance(curve[f"preset {s}"], curve[f"eager {s}"]) for s in range(seeds)]
        noise = {"rounding": mean_distance(curve["eager 0"], curve["eager 0 again"])}
        if seeds >= 2:
            noise["between_seeds"] = statistics.fmean(
                mean_distance(curve[f"eager {a}"], curve[f"eager {b}"])
                for a, b in combinations(range(seeds), 2)
            )
        c: dict[str, Any] = {
            "preset_to_eager_same_seed": statistics.fmean(same_seed),
            "noise": noise,
            "first_window": {run: values[0] for run, values in curve.items()},
        }
        if seeds >= 2:
            c["levels"] = {
                kind: [statistics.fmean(curve[f"{kind} {s}"]) for s in range(seeds)]
                for kind in ("preset", "eager")
            }
            c["level_t"] = welch_t(c["levels"]["preset"], c["levels"]["eager"])
            c["paired"] = paired_t(c["levels"]["preset"], c["levels"]["eager"])
            fp32 = [
                statistics.fmean(curve[f"fp32 {s}"]) for s in range(seeds) if f"fp32 {s}" in curve
            ]
            if len(fp32) >= 2:  # each bf16 path's level against fp32's, over the seeds fp32 has
                c["levels"]["fp32"] = fp32
                c["level_t_to_fp32"] = {
                    kind: welch_t(c["levels"][kind][: len(fp32)], fp32)
                    for kind in ("preset", "eager")
                }
        compared[name] = c
    return compared


def curves(
    config, steps: int, log_every: int, compiled: bool, seed: int, benchmark: bool, precision
) -> dict[str, Any]:
    """One launch of ``steps`` steps on random pairs, one rank: its loss window means."""
    from ffjobs.models.prepare import ensure_demo_inputs
    from ffjobs.train.launch import launch_local

    config = copy.deepcopy(config)
    tc = config.train
    tc.steps, tc.seed = steps, tc.seed + seed
    tc.compile = tc.compile and compiled  # the preset as configured; eager never compiles
    tc.precision = precision or tc.precision
    tc.cudnn_benchmark = tc.cudnn_benchmark and benchmark
    tc.log_every = log_every or tc.log_every
    tc.warmup_steps = min(tc.warmup_steps, steps)
    tc.resume, tc.progress = False, False
    config.tracking.enabled = False  # a benchmark's launches are not runs
    ensure_demo_inputs(config)  # the identity encoder's weights, where the preset names them
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ffjobs-bench-numerics-") as folder:
        tc.checkpoint_dir = folder
        history = launch_local(config, 1, mode="train", data="memory", quiet_stdout=True)["history"]
    losses = sorted(k for k in history[0] if k.startswith("loss/"))
    return {
        "seconds": time.perf_counter() - started,
        "steps": [h["step"] for h in history],
        **{name: [h[name] for h in history] for name in losses},
    }


def finished_launches(out: Path | None, settings: dict) -> dict[str, dict]:
    """The runs in an earlier ``--out`` file made with the same ``settings``; none otherwise."""
    if out is None or not out.exists():
        return {}
    try:
        earlier = json.loads(out.read_text())
        runs = earlier["runs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"--out {out}: not a report of ffjobs bench numerics ({exc})") from None
    differing = {k: earlier.get(k) for k, v in settings.items() if earlier.get(k) != v}
    if differing:
        raise UserError(
            f"--out {out} holds launches of other settings ({differing}, here {settings}): "
            "name another --out"
        )
    print(f"{out}: keeping {len(runs)} finished launch(es)", file=sys.stderr)
    return runs


def run_numerics(
    config,
    settings: dict,
    seeds: int,
    fp32: bool,
    out: Path | None = None,
) -> dict[str, Any]:
    """Run every launch of :func:`launches` not yet in ``out``; the report (``settings``, the
    runs, the comparison over the first ``seeds`` seeds), also written to ``out`` after each
    launch."""
    runs = finished_launches(out, settings)

    def report() -> dict[str, Any]:
        done = min(finished_seeds(runs), seeds)
        compared = compare(runs, done) if done else {}
        return {**settings, "runs": runs, "seeds": done, "compared": compared}

    for name, compiled, seed, benchmark, precision in launches(seeds, fp32):
        if name in runs:
            continue
        print(f"{name}: {settings['steps']} steps", file=sys.stderr)
        runs[name] = curves(
            config, settings["steps"], settings["log_every"], compiled, seed, benchmark, precision
        )
        if out is not None:
            out.write_text(json.dumps(report()))
    return report()


def summary_lines(report: dict[str, Any]) -> list[str]:
    """One line per loss: each comparison and whether it is within noise."""
    first = report["runs"]["preset 0"]
    lines = [
        f"{report['seeds']} seed(s), {len(first['steps'])} windows over {report['steps']} steps"
    ]
    for name, c in report["compared"].items():
        noise = " / ".join(f"{kind} {value:.4f}" for kind, value in c["noise"].items())
        close = c["preset_to_eager_same_seed"] <= max(c["noise"].values())
        line = (
            f"{name}: preset to eager, same seed {c['preset_to_eager_same_seed']:.4f}; "
            f"noise: {noise} ({'within noise' if close else 'OUTSIDE'})"
        )
        if "level_t" in c:
            level = abs(c["level_t"]) < LEVEL_T
            line += (
                f"; level preset {statistics.fmean(c['levels']['preset']):.4f} vs eager "
                f"{statistics.fmean(c['levels']['eager']):.4f}, t {c['level_t']:+.2f} "
                f"({'within noise' if level else 'OUTSIDE'}); paired by seed "
                f"{c['paired']['mean']:+.4f}, t {c['paired']['t']:+.2f}"
            )
        if "level_t_to_fp32" in c:
            to_fp32 = c["level_t_to_fp32"]
            line += (
                f"; fp32 {statistics.fmean(c['levels']['fp32']):.4f}: t preset to fp32 "
                f"{to_fp32['preset']:+.2f}, eager to fp32 {to_fp32['eager']:+.2f}"
            )
        lines.append(line)
    return lines


def register(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "numerics", help="a preset's loss curves beside bf16 eager (and fp32) over seeds"
    )
    add_config_arguments(parser)
    add_json_argument(parser)
    parser.add_argument("--steps", type=int, default=200, help="steps per launch (default 200)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of each path (default 3)")
    parser.add_argument("--log-every", type=int, default=0, help="window (default: the preset's)")
    parser.add_argument("--fp32", action="store_true", help="add eager fp32 at each seed")
    parser.add_argument("--out", type=Path, help="report file, kept and resumed across calls")
    parser.set_defaults(handler=_bench_numerics)


def _bench_numerics(args: argparse.Namespace) -> int:
    from ffjobs.cli import config_from_args, print_json

    if args.steps < 1 or args.seeds < 1 or args.log_every < 0:
        raise UserError("--steps and --seeds must be >= 1, --log-every >= 0")
    if args.config is None:
        import torch

        args.config = "train-256" if torch.cuda.is_available() else "local"
    config = config_from_args(args)
    settings = {
        "config": args.config,
        "steps": args.steps,
        "log_every": args.log_every,
        "set": overrides_from_args(args),
    }
    report = run_numerics(config, settings, args.seeds, args.fp32, args.out)
    if args.json:
        print_json(report)
    else:
        print("\n".join(summary_lines(report)))
    return 0
