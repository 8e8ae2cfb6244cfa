"""A short run of a preset against bf16 eager, loss by loss, in one call: are its numerics honest?

Four launches of ``--steps`` steps on ``--data memory`` (random pairs), one rank each, from
fresh checkpoint folders:

* ``preset``: as configured (on train-256: bf16, channels_last, compiled, CUDA graphs);
* ``eager``: the same with ``train.compile=false``; same seed, so the same initial weights
  and the same batches;
* ``eager, seed+1`` and ``eager, seed+2``: eager from other initial weights and batches: how
  far loss curves of the same code lie apart anyway (a GAN's curves part within tens of steps).

For each loss, the mean over the log windows (``train.log_every`` steps each) of the preset's
distance to eager, beside the three distances between the eager runs: the preset is "within
noise" where its distance is no larger than the largest of those. The first window's values
show how closely the preset tracks eager before the curves part. JSON on stdout (the curves
too), a summary on stderr.

    python infra/bench/loss_curves.py [--config train-256] [--steps 300] [--log-every N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from itertools import combinations

from ffjobs.config import load_config, resolve_preset
from ffjobs.models.prepare import ensure_demo_inputs
from ffjobs.train.launch import launch_local


def curves(args: argparse.Namespace, compile_: bool, seed_offset: int, folder: str) -> dict:
    config = load_config(resolve_preset(args.config))
    tc = config.train
    tc.steps, tc.compile, tc.seed = args.steps, compile_, tc.seed + seed_offset
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train-256")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument(
        "--log-every",
        type=int,
        default=0,
        help="steps per window (default: the preset's train.log_every); 1 makes the first "
        "window step 1, where preset and eager start from the same weights and batch",
    )
    args = parser.parse_args()
    eager = ("eager", "eager, seed+1", "eager, seed+2")
    runs = {}
    for name, compile_, offset in (
        ("preset", True, 0),
        *((e, False, i) for i, e in enumerate(eager)),
    ):
        with tempfile.TemporaryDirectory(prefix="ffjobs-loss-curves-") as folder:
            runs[name] = curves(args, compile_, offset, folder)
    names = [k for k in runs["preset"] if k.startswith("loss/")]
    compared = {
        name: {
            "preset_to_eager": mean_distance(runs["preset"][name], runs["eager"][name]),
            "between_eager_seeds": [
                mean_distance(runs[a][name], runs[b][name]) for a, b in combinations(eager, 2)
            ],
            "first_window": {run: runs[run][name][0] for run in runs},
        }
        for name in names
    }
    json.dump(
        {"config": args.config, "steps": args.steps, "runs": runs, "compared": compared}, sys.stdout
    )
    windows = len(runs["preset"]["steps"])
    for name, c in compared.items():
        noise = max(c["between_eager_seeds"])
        verdict = "within noise" if c["preset_to_eager"] <= noise else "OUTSIDE"
        first = ", ".join(f"{run} {value:.4f}" for run, value in c["first_window"].items())
        print(
            f"{name}: preset vs eager {c['preset_to_eager']:.4f}, between eager seeds "
            + " / ".join(f"{d:.4f}" for d in c["between_eager_seeds"])
            + f" (mean over {windows} windows): {verdict}; first window: {first}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
