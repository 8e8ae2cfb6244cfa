"""The compiled preset's gradients against bf16 eager's at the same weights and batch, step by step.

Three trainers in one process, on one device, from the same seed:

* ``preset``: as configured, compiled (on train-256: bf16, channels_last, CUDA graphs);
* ``eager``: the same with ``train.compile=false``;
* ``fp32``: eager in fp32: the gradient both bf16 paths round.

Before each step eager's weights are copied into the other two (in place: CUDA graphs keep
their addresses), all three take the same batch, and each network's gradients (after the
step's clipping, which scales them as a whole) are compared: cosine and the norm of the
difference relative to the second's. Compiled and eager bf16 round differently (Inductor
keeps fused intermediates in fp32), so they differ from each other; the compiled path is
honest where it is no further from fp32 than eager bf16 is. A compiled path that computed
something else (a stale capture, a lost term) would be far further. The steps after the first
few replay the preset's CUDA graphs. Loss curves cannot show this: a GAN's curves part within
tens of steps whatever the arithmetic (``ffjobs bench numerics``).

    python dev/numerics/grad_agreement.py [--config train-256] [--steps 20] [--set KEY=VALUE]
        --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from ffjobs.config import load_config, resolve_preset
from ffjobs.models.prepare import ensure_demo_inputs
from ffjobs.train.distributed import compute_init
from ffjobs.train.trainer import Trainer
from ffjobs.train.worker import build_train_dataset, prepare_compiler

KINDS = {
    "preset": {"compile": True},
    "eager": {"compile": False},
    "fp32": {"compile": False, "precision": "fp32"},
}
PAIRS = (("preset", "eager"), ("preset", "fp32"), ("eager", "fp32"))
"""Which gradients are compared: each precision's distance to fp32 is the rounding it adds."""


def gradients(trainer: Trainer, network: str) -> torch.Tensor:
    module = trainer.g_module if network == "generator" else trainer.d_module
    return torch.cat(
        [p.grad.detach().double().flatten() for p in module.parameters() if p.grad is not None]
    )


def agreement(ours: torch.Tensor, theirs: torch.Tensor) -> dict[str, float]:
    """The cosine of two gradients and the norm of their difference relative to ``theirs``."""
    return {
        "cosine": float(torch.cosine_similarity(ours, theirs, dim=0)),
        "relative_difference": float((ours - theirs).norm() / theirs.norm()),
    }


@torch.no_grad()
def copy_weights(source: Trainer, into: list[Trainer]) -> None:
    """``source``'s G and D weights into each of ``into``, in place (CUDA graphs keep their
    addresses)."""
    for trainer in into:
        for network in ("g_module", "d_module"):
            ours, theirs = getattr(trainer, network), getattr(source, network)
            for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
                a.copy_(b)


def build_trainers(
    preset: str, sets: list[str], kinds: dict[str, dict], scratch: str
) -> dict[str, Trainer]:
    """One trainer per kind, in this process, on one device, from the preset's seed:
    ``preset`` with ``sets`` and the kind's ``train`` settings, checkpoints under ``scratch``,
    taking their batches from one ``--data memory`` set."""
    base = load_config(resolve_preset(preset), sets)
    ensure_demo_inputs(base)  # the identity encoder's weights, where the preset names them
    env, device = compute_init(base.train.backend)
    prepare_compiler(device)  # a compiled kind's trainer compiles whatever the config says
    dataset = build_train_dataset(base, "memory", 1)
    trainers = {}
    for kind, changes in kinds.items():
        config = load_config(resolve_preset(preset), sets)
        for key, value in {"resume": False, "progress": False, **changes}.items():
            setattr(config.train, key, value)
        trainers[kind] = Trainer(config, env, device, dataset, checkpoint_dir=f"{scratch}/{kind}")
    return trainers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train-256")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ffjobs-grad-agreement-") as scratch:
        trainers = build_trainers(args.config, args.set, KINDS, scratch)
        eager = trainers["eager"]
        steps = []
        for step in range(1, args.steps + 1):
            batch = eager.data.next()
            copy_weights(eager, [t for t in trainers.values() if t is not eager])
            losses = {kind: trainer.train_step([batch]) for kind, trainer in trainers.items()}
            row = {"step": step}
            for network in ("generator", "discriminator"):
                grads = {kind: gradients(trainer, network) for kind, trainer in trainers.items()}
                for a, b in PAIRS:
                    for measure, value in agreement(grads[a], grads[b]).items():
                        row[f"{a} vs {b}/{network}/{measure}"] = value
            for a, b in PAIRS:
                row[f"{a} vs {b}/loss_difference"] = max(
                    abs(float(losses[a][name]) - float(losses[b][name])) for name in losses[b]
                )
            steps.append(row)
            args.out.write_text(json.dumps({"config": args.config, "steps": steps}))
            print(json.dumps(row), file=sys.stderr)
    for a, b in PAIRS:
        for network in ("generator", "discriminator"):
            gap = [1 - r[f"{a} vs {b}/{network}/cosine"] for r in steps]
            rel = [r[f"{a} vs {b}/{network}/relative_difference"] for r in steps]
            print(
                f"{a} vs {b}, {network}: 1 - gradient cosine median {statistics.median(gap):.2e} "
                f"max {max(gap):.2e}; relative difference median {statistics.median(rel):.4f} "
                f"max {max(rel):.4f}",
                file=sys.stderr,
            )


if __name__ == "__main__":
    main()
