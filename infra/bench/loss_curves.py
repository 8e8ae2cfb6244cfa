"""Short runs of a preset against bf16 eager, loss by loss, in one call: are its numerics honest?

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
  below 3: with three seeds each, t has about 4 degrees of freedom and its two-sided 5% point
  is 2.78. Beside it, not a verdict: the mean of the per-seed differences and its t (``n``
  seeds, ``n - 1`` degrees of freedom), which pairing by seed makes more sensitive.

With ``--fp32``, each seed also gets ``fp32``: eager in fp32 (TF32 matmuls and convolutions
on CUDA, as the trainer sets them), the arithmetic both bf16 paths round. Each bf16 path's
level is then tested against fp32's (Welch's t): where the preset's level differs from eager's,
this says which of the two is nearer fp32.

``--out FILE`` is rewritten after each launch, with the comparison over the seeds whose two
launches finished (what finished survives a time limit); the summary goes to stderr. Where
FILE holds launches of the same config and steps already, those are kept and not run again:
a second call with the same ``--out`` goes on where a time limit stopped the first.
``--log-every 1`` makes the first window step 1, where preset and eager share weights and batch.

    python infra/bench/loss_curves.py [--config train-256] [--steps 300] [--seeds 3]
        [--log-every N] [--fp32] [--set KEY=VALUE] --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

from ffjobs.config import load_config, resolve_preset
from ffjobs.models.prepare import ensure_demo_inputs
from ffjobs.train.launch import launch_local

LEVEL_T = 3.0
"""Welch's t above which the preset's loss level differs from eager's (see the docstring)."""


def curves(
    args: argparse.Namespace,
    compile_: bool,
    seed_offset: int,
    folder: str,
    benchmark: bool,
    precision: str | None = None,
) -> dict:
    config = load_config(resolve_preset(args.config), args.set)
    tc = config.train
    tc.steps, tc.compile, tc.seed = args.steps, compile_, tc.seed + seed_offset
    tc.precision = precision or tc.precision
    tc.cudnn_benchmark = tc.cudnn_benchmark and benchmark
    tc.log_every = args.log_every or tc.log_every
    tc.warmup_steps = min(tc.warmup_steps, args.steps)
    tc.checkpoint_dir, tc.resume, tc.progress = folder, False, False
    ensure_demo_inputs(config)  # the identity encoder's weights, where the preset names them
    started = time.perf_counter()
    result = launch_local(config, 1, mode="train", data="memory", quiet_stdout=True)
    history = result["history"]
    losses = sorted(k for k in history[0] if k.startswith("loss/"))
    return {
        "seconds": time.perf_counter() - started,
        "steps": [h["step"] for h in history],
        **{name: [h[name] for h in history] for name in losses},
    }


def mean_distance(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def welch_t(a: list[float], b: list[float]) -> float:
    error = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    return (statistics.fmean(a) - statistics.fmean(b)) / error if error else 0.0


def paired(ours: list[float], eager: list[float]) -> dict[str, float]:
    """The mean of the paired differences and its t (0 where they do not vary)."""
    differences = [a - b for a, b in zip(ours, eager, strict=False)]
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return {"mean": mean}
    error = statistics.stdev(differences) / len(differences) ** 0.5
    return {"mean": mean, "t": mean / error if error else 0.0}


def finished_seeds(runs: dict[str, dict]) -> int:
    """How many seeds, from the first, have both launches (and seed 0 its rerun) finished."""
    if "eager 0 again" not in runs:
        return 0
    seeds = 0
    while f"preset {seeds}" in runs and f"eager {seeds}" in runs:
        seeds += 1
    return seeds


def compare(runs: dict[str, dict]) -> dict:
    """Per loss: the same-seed and the level comparison of the module docstring, over the
    :func:`finished_seeds` (at least one)."""
    seeds = finished_seeds(runs)
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
        c = {
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
            c["paired"] = paired(c["levels"]["preset"], c["levels"]["eager"])
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


def finished_launches(out: Path, settings: dict) -> dict[str, dict]:
    """The runs in an earlier ``--out`` file made with the same ``settings``; none otherwise."""
    if not out.exists():
        return {}
    earlier = json.loads(out.read_text())
    if any(earlier.get(key) != value for key, value in settings.items()):
        sys.exit(f"{out} holds launches of other settings than {settings}: name another --out")
    print(f"{out}: keeping {len(earlier['runs'])} finished launch(es)", file=sys.stderr)
    return earlier["runs"]


def write_report(out: Path, settings: dict, runs: dict[str, dict]) -> None:
    """Writes ``settings``, the runs and their comparison (once a seed has finished) to ``out``."""
    seeds = finished_seeds(runs)
    compared = compare(runs) if seeds else {}
    out.write_text(json.dumps({**settings, "runs": runs, "seeds": seeds, "compared": compared}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train-256")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=0, help="default: the preset's")
    parser.add_argument("--fp32", action="store_true", help="add eager fp32 at each seed")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    launches = []
    for seed in range(args.seeds):
        launches.append((f"preset {seed}", True, seed, True, None))
        launches.append((f"eager {seed}", False, seed, True, None))
        if seed == 0:
            launches.append(("eager 0 again", False, 0, False, None))
        if args.fp32:
            launches.append((f"fp32 {seed}", False, seed, True, "fp32"))
    settings = {
        "config": args.config,
        "steps": args.steps,
        "log_every": args.log_every,
        "set": args.set,
    }
    runs: dict[str, dict] = finished_launches(args.out, settings)
    for name, compile_, seed, benchmark, precision in launches:
        if name not in runs:
            with tempfile.TemporaryDirectory(prefix="ffjobs-loss-curves-") as folder:
                runs[name] = curves(args, compile_, seed, folder, benchmark, precision)
            write_report(args.out, settings, runs)
    compared = compare(runs)  # what --out holds: it was written when its last launch finished
    windows = len(runs["preset 0"]["steps"])
    seeds = finished_seeds(runs)
    print(f"{seeds} seed(s), {windows} windows over {args.steps} steps", file=sys.stderr)
    for name, c in compared.items():
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
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
