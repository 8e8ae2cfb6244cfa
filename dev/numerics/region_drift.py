"""Does a compiled preset stay the arithmetic of its own modules along its own trajectory?

One preset trainer trains ``--steps`` steps on ``--data memory``. On step 1 and every
``--every``-th step, on that step's batch and the trainer's current weights:

* each compiled region's outputs (the identity encoder with and without grad, G, D) are
  compared with its plain module's on the same inputs, inside the step
  itself (the regions' outputs, as the step uses them);
* an eager trainer of the same config (``train.compile=false``) gets the preset's weights and
  takes the same batch: the two steps' losses and gradients are compared;
* G's gradient of each loss term alone (weighted as configured), in the preset, in eager and in
  an eager fp32 trainer, all at the preset's weights on that batch: each bf16 path's against
  fp32's, as the ratio of norms and the cosine. A rounding difference that steers training
  one way shows as a ratio away from 1 that keeps its side step after step.

Compiled and eager bf16 round differently, so neither difference is zero; what matters is
whether it grows as the weights move away from those the regions were captured at (a capture
that kept a weight as a constant would compute with the first step's weights, and the
difference would grow with every step).

    python dev/numerics/region_drift.py [--config train-256] [--steps 150] [--every 10]
        [--set KEY=VALUE] --out FILE
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import torch
from grad_agreement import agreement, build_trainers, copy_weights, gradients  # beside this script
from torch import nn
from torch.utils._pytree import tree_leaves

from ffjobs.train.trainer import Trainer


class Probe(nn.Module):
    """``region`` as the step calls it; while ``record`` is a dict, each call also runs
    ``module`` on the same inputs (no grad) and records the largest relative difference of
    their outputs, keyed by region and calling context."""

    def __init__(self, name: str, region: nn.Module, module: nn.Module):
        super().__init__()
        self.name, self.region, self.plain = name, region, module
        self.record: dict[str, float] | None = None

    def forward(self, *args):
        out = self.region(*args)
        if self.record is not None:
            frozen = not any(p.requires_grad for p in self.plain.parameters())
            context = f"{self.name} (grad {torch.is_grad_enabled()}, frozen {frozen})"
            with torch.no_grad():
                plain = self.plain(*args)
            worst = 0.0
            for a, b in zip(tree_leaves(out), tree_leaves(plain), strict=True):
                a, b = a.detach().float(), b.float()
                worst = max(worst, float((a - b).norm() / b.norm().clamp_min(1e-12)))
            self.record[context] = max(self.record.get(context, 0.0), worst)
        return out


TERMS = ("adversarial", "identity", "reconstruction", "feature_matching")


def term_gradients(trainer: Trainer, batch: dict) -> dict[str, torch.Tensor]:
    """G's gradient of each weighted loss term alone, at the trainer's weights on ``batch``: a
    forward and backward per term with the other terms' weights 0."""
    weights = trainer.config.model.losses
    grads = {}
    try:
        for term in TERMS:
            others = {other: 0.0 for other in TERMS if other != term}
            trainer.config.model.losses = dataclasses.replace(weights, **others)
            for net in trainer.networks:
                net.zero_grad()
            if trainer.compile_mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            trainer._forward_backward(batch, 1)
            grads[term] = gradients(trainer, "generator")
    finally:
        trainer.config.model.losses = weights
    return grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train-256")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ffjobs-region-drift-") as scratch:
        trainers = build_trainers(
            args.config,
            args.set,
            {
                "preset": {"compile": True},
                "eager": {"compile": False},
                "fp32": {"compile": False, "precision": "fp32"},
            },
            scratch,
        )
        preset, eager, fp32 = trainers["preset"], trainers["eager"], trainers["fp32"]
        probes = [
            Probe("identity", preset.identity, preset.identity_encoder),
            Probe("generator", preset.generator.wrapped, preset.g_module),
            Probe("discriminator", preset.discriminator.wrapped, preset.d_module),
        ]
        preset.identity, preset.generator.wrapped = probes[0], probes[1]
        preset.discriminator.wrapped = probes[2]
        rows = []
        for step in range(1, args.steps + 1):
            batch = preset.data.next()
            check = step == 1 or step % args.every == 0
            if not check:
                preset.train_step([batch])
                continue
            copy_weights(preset, [eager, fp32])
            terms = {kind: term_gradients(t, batch) for kind, t in trainers.items()}
            record: dict[str, float] = {}
            for probe in probes:
                probe.record = record
            # eager first: the preset's step moves the weights
            eager_losses = eager.train_step([batch])
            eager_grads = {n: gradients(eager, n) for n in ("generator", "discriminator")}
            preset_losses = preset.train_step([batch])
            for probe in probes:
                probe.record = None
            row = {"step": step, "regions": record}
            for network, theirs in eager_grads.items():
                for measure, value in agreement(gradients(preset, network), theirs).items():
                    row[f"{network}/{measure}"] = value
            for term in TERMS:
                reference = terms["fp32"][term]
                row[f"{term}/to fp32"] = {
                    kind: {
                        "norm_ratio": float(terms[kind][term].norm() / reference.norm()),
                        "cosine": float(
                            torch.cosine_similarity(terms[kind][term], reference, dim=0)
                        ),
                    }
                    for kind in ("preset", "eager")
                }
            row["losses"] = {
                name: [float(preset_losses[name]), float(eager_losses[name])]
                for name in preset_losses
            }
            rows.append(row)
            args.out.write_text(json.dumps({"config": args.config, "set": args.set, "rows": rows}))
            print(json.dumps(row), file=sys.stderr)


if __name__ == "__main__":
    main()
