"""When does identity transfer start? Train the embedded default's model under a few recipes
and measure it on the held-out identities every N steps (the trainer's own probe,
``evaluate.every_steps``), one process, one device.

    python dev/quality/recipe_sweep.py OUT --steps 600 --every 50 --seeds 0 1

Each variant is a list of ``--set`` overrides on ``configs/local.yaml`` (the demo's data: 24
synthetic identities x 8 images at 64 px, 5 held out; global batch 16 as the demo's 2 ranks x
8), trained and measured as ``ffjobs bench quality`` does (the untrained generator at step 0
too). Writes ``OUT/curves.json`` (variant -> seed -> step -> heldout metrics) and prints a
line a run. No MLflow needed: runs on a GPU machine with only torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ffjobs.bench.quality import summary_line, train_and_measure  # noqa: E402

BASE = ["tracking.enabled=false", "train.batch_size=16", "train.progress=false"]
BEFORE = [
    "model.generator_norm=instance", "train.lr=2e-4", "train.lr_discriminator=2e-4",
    "train.lr_schedule=constant", "data.same_identity_prob=0.5", "model.losses.identity=10",
]  # fmt: skip
"""The embedded default's recipe before this sweep (the dataclasses' defaults)."""
RECIPE = [
    "model.generator_norm=none", "train.lr_schedule=cosine", "train.lr=1e-3",
    "train.lr_discriminator=1e-3", "data.same_identity_prob=0.2", "model.losses.identity=30",
]  # fmt: skip
"""The first recipe that moved identity within 200 steps; ``configs/local.yaml`` trains with
it less the cross-identity pairs (``recipe-cross``, which did as well or better)."""
VARIANTS = {
    "preset": [],  # the --preset as it is
    "before": BEFORE,
    "no-norm+cosine": [*BEFORE, "model.generator_norm=none", "train.lr_schedule=cosine"],
    "recipe": RECIPE,
    "recipe-lr": [*RECIPE, "train.lr=2e-4", "train.lr_discriminator=2e-4"],
    "recipe-cross": [*RECIPE, "data.same_identity_prob=0.5"],
    "recipe-id30": [*RECIPE, "model.losses.identity=10"],
    "recipe-cosine": [*RECIPE, "train.lr_schedule=constant"],
    "recipe-norm": [*RECIPE, "model.generator_norm=instance"],
    "recipe+lr2e-3": [*RECIPE, "train.lr=2e-3", "train.lr_discriminator=2e-3"],
    "recipe+recon3": [*RECIPE, "model.losses.reconstruction=3"],
    "no-norm": ["model.generator_norm=none", "model.losses.identity=30"],
    "no-norm+lr1e-3": [
        "model.generator_norm=none", "model.losses.identity=30", "train.lr=1e-3",
        "train.lr_discriminator=1e-3", "train.lr_schedule=cosine",
    ],
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--set", action="append", default=[], help="for every variant")
    parser.add_argument("--preset", default="local", help="the config the variants change")
    args = parser.parse_args()
    args.out = args.out.resolve()  # before the chdir below
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # runs/data, runs/models: the preset's relative paths
    curves: dict = {}
    for name in args.variants:
        for seed in args.seeds:
            sets = [*BASE, *args.set, *VARIANTS[name]]
            seconds, points = train_and_measure(args.preset, sets, seed, args.steps, args.every)
            curves.setdefault(name, {})[seed] = {"seconds": seconds, "points": points}
            (args.out / "curves.json").write_text(json.dumps(curves, indent=1))
            print(f"{name} {summary_line(seed, seconds, points)}", flush=True)


if __name__ == "__main__":
    main()
