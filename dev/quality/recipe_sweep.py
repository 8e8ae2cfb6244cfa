"""When does identity transfer start? Train the embedded default's model under a few recipes
and measure it on the held-out identities every N steps (the trainer's own probe,
``evaluate.every_steps``), one process, one device.

    python dev/quality/recipe_sweep.py OUT --steps 600 --every 50 --seeds 0 1

Each variant is a list of ``--set`` overrides on ``configs/local.yaml`` (the demo's data: 24
synthetic identities x 8 images at 64 px, 5 held out; global batch 16 as the demo's 2 ranks x
8). Writes ``OUT/curves.json`` (variant -> seed -> step -> heldout metrics) and prints a table.
No MLflow needed: runs on a GPU machine with only torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ffjobs.config import load_config  # noqa: E402
from ffjobs.models.prepare import ensure_demo_inputs  # noqa: E402
from ffjobs.quality.encoder import ensure_evaluation_encoder  # noqa: E402
from ffjobs.train.distributed import DistEnv  # noqa: E402
from ffjobs.train.probe import TrainingProbe  # noqa: E402
from ffjobs.train.trainer import Trainer  # noqa: E402
from ffjobs.train.worker import build_train_dataset  # noqa: E402

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
    "local": [],  # configs/local.yaml as it is
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


class Curve:
    """The trainer's logger: keeps the held-out metrics by step."""

    def __init__(self):
        self.points: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        kept = {k: v for k, v in metrics.items() if k.startswith(("heldout_", "loss_identity"))}
        if kept:
            self.points.setdefault(step, {}).update(kept)

    def set_tags(self, tags: dict[str, str]) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--set", action="append", default=[], help="for every variant")
    parser.add_argument("--untrained", action="store_true", help="measure step 0 too")
    parser.add_argument("--preset", default="local", help="the config the variants change")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # runs/data, runs/models: the preset's relative paths
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = load_config(args.preset, [*BASE, *args.set])
    ensure_demo_inputs(base)
    ensure_evaluation_encoder(base)
    curves: dict = {}
    for name in args.variants:
        for seed in args.seeds:
            sets = [*BASE, *args.set, *VARIANTS[name], f"train.seed={seed}", f"train.steps={args.steps}",
                    f"evaluate.every_steps={args.every}", f"train.log_every={args.every}",
                    f"train.checkpoint_every={args.steps}",
                    f"train.checkpoint_dir={args.out / 'ckpt' / name / str(seed)}"]  # fmt: skip
            config = load_config(args.preset, sets)
            curve = Curve()
            started = time.perf_counter()
            trainer = Trainer(
                config,
                DistEnv(0, 1, 0, "127.0.0.1", 0, "single"),
                device,
                build_train_dataset(config, "dataset", 1),
                logger=curve,
                probe=TrainingProbe(config, device),
            )
            if args.untrained:
                trainer._measure_held_out(0)  # the generator as training starts it
            list(trainer.run_steps(args.steps))
            seconds = time.perf_counter() - started
            curves.setdefault(name, {})[seed] = {"seconds": seconds, "points": curve.points}
            (args.out / "curves.json").write_text(json.dumps(curves, indent=1))
            top1 = [
                f"{s}:{p['heldout_identity_top1']:.2f}"
                for s, p in sorted(curve.points.items())
                if "heldout_identity_top1" in p
            ]
            last = curve.points[max(curve.points)] if curve.points else {}
            final = ", ".join(
                f"{k.removeprefix('heldout_')} {v:.3g}"
                for k, v in last.items()
                if k.startswith("heldout_")
            )
            print(f"{name} seed {seed} ({seconds:.0f} s): top1 " + " ".join(top1), flush=True)
            print(f"  at the end: {final}", flush=True)


if __name__ == "__main__":
    main()
