"""Which compiled region moves the preset's loss levels away from eager bf16's?

For each of ``--seeds`` seeds (``train.seed`` + 0, 1, ...), in this process, on one device, one
trainer per variant trains ``--steps`` steps on ``--data memory`` from the same initial weights
and batches:

* ``preset``: as configured (compiled; ``train.compile_cache`` off: nothing saved or loaded);
* ``eager``: ``train.compile=false``;
* ``<region> eager``, one per ``--region``: the preset with that region's compiled wrapper
  replaced by its plain module (the rest compiled as in the preset). Regions: ``identity`` (the
  frozen identity encoder, with and without grad), ``generator``, ``discriminator`` (D's
  trained pass on real and fused images), ``frozen_discriminator`` (D's pass for G's loss);
* ``preset KEY=VALUE``, one per ``--inductor``: the preset compiled with that Inductor setting
  (``torch._inductor.config``; VALUE as YAML), e.g. ``emulate_precision_casts=true``.

Each run's level of each loss is its mean over its windows (``train.log_every`` steps). Runs of
one seed share their initial weights and batches, so each variant's level is compared with
eager's at the same seed: the mean of the paired differences over the seeds and its t (the
mean over its standard error; with n seeds, n - 1 degrees of freedom). A region whose eager
variant is level with eager while the preset is not is where the preset's difference comes
from.

``--out FILE`` is rewritten after each run (what finished survives a time limit); the summary
goes to stderr.

    python dev/numerics/region_ablation.py [--config train-256] [--steps 200] [--seeds 3]
        [--region identity ...] [--inductor KEY=VALUE ...] [--set KEY=VALUE] --out FILE
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch._inductor.config as inductor_config
import yaml
from grad_agreement import build_trainers  # beside this script

from ffjobs.bench.numerics import paired_t
from ffjobs.config import load_config, resolve_preset
from ffjobs.train.trainer import Trainer, TrainResult

REGIONS = ("identity", "generator", "discriminator", "frozen_discriminator")


def leave_eager(trainer: Trainer, region: str) -> None:
    """``trainer``'s compiled ``region`` replaced by its plain module (one rank: no DDP)."""
    if region == "identity":
        trainer.identity = trainer.identity_encoder
    elif region == "generator":
        trainer.generator.wrapped = trainer.g_module
    elif region == "discriminator":
        trainer.discriminator.wrapped = trainer.d_module
    else:
        trainer.frozen_discriminator = trainer.d_module


def levels(args: argparse.Namespace, seed: int, variant: str, scratch: str) -> dict[str, float]:
    """Each loss's mean over the windows of one run of ``variant`` at ``seed``."""
    changes = {"compile": variant != "eager", "compile_cache": False}
    sets = [*args.set, f"train.seed={args.base_seed + seed}", "train.checkpoint_every=1000000000"]
    trainer = build_trainers(args.config, sets, {variant: changes}, scratch)[variant]
    trainer.tc.steps = 10**9  # no final checkpoint: the run stops at --steps
    inductor: dict = {}
    if variant.endswith(" eager") and variant != "eager":
        leave_eager(trainer, variant.removesuffix(" eager"))
    elif "=" in variant:
        key, value = variant.removeprefix("preset ").split("=", 1)
        inductor[key] = yaml.safe_load(value)
    result = TrainResult(0, 0)
    with inductor_config.patch(inductor):  # the regions compile on their first call
        for _ in trainer.run_steps(args.steps, result):
            pass
    history = result.history
    names = sorted(k for k in history[0] if k.startswith("loss/"))
    out = {name: statistics.fmean(h[name] for h in history) for name in names}
    trainer.checkpointer.close()
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train-256")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--region", action="append", choices=REGIONS, default=[])
    parser.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.base_seed = load_config(resolve_preset(args.config), args.set).train.seed
    variants = [
        "eager",
        "preset",
        *(f"{region} eager" for region in args.region),
        *(f"preset {setting}" for setting in args.inductor),
    ]
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    compared: dict[str, dict] = {}
    for seed in range(args.seeds):
        for variant in variants:
            with tempfile.TemporaryDirectory(prefix="ffjobs-region-ablation-") as scratch:
                runs[variant].append(levels(args, seed, variant, scratch))
            print(f"seed {seed} {variant}: {json.dumps(runs[variant][-1])}", file=sys.stderr)
            done = len(runs["eager"])
            compared = {
                variant: {
                    name: paired_t(
                        [run[name] for run in runs[variant][:done]],
                        [run[name] for run in runs["eager"][:done]],
                    )
                    for name in runs["eager"][0]
                }
                for variant in variants[1:]
                if len(runs[variant]) >= done
            }
            args.out.write_text(
                json.dumps(
                    {
                        "config": args.config,
                        "steps": args.steps,
                        "set": args.set,
                        "runs": runs,
                        "compared_to_eager": compared,
                    }
                )
            )
    for variant, losses in compared.items():
        cells = "; ".join(
            f"{name.removeprefix('loss/')} {c['mean']:+.4f} (t {c.get('t', float('nan')):+.2f})"
            for name, c in losses.items()
        )
        print(f"{variant} - eager, over {len(runs['eager'])} seed(s): {cells}", file=sys.stderr)


if __name__ == "__main__":
    main()
