"""Tiny, deterministic training configs that run in seconds on CPU with gloo."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from ffjobs.config import Config, load_config

TINY_MODEL = [
    "model.width=8",
    "model.max_width=16",
    "model.residual_blocks=1",
    "model.discriminator_width=8",
    "model.discriminator_layers=2",
    "model.identity_width=0.25",
    "model.identity_input_size=32",
    "model.identity_dim=32",
]


def tiny_identity_weights() -> str:
    """An identity encoder of the tiny model's shape, pre-trained once per test process.

    The local demo's encoder (300 steps on the default 24x8 synthetic identities), as training
    really uses. With a random or barely trained encoder the embeddings are near-degenerate and
    the identity loss's cosine gradients are large and noisy: the 2-rank vs 1-rank comparison
    then drifts by 1e-5 to 3e-4 after 3 steps instead of staying below 1e-6.
    """
    out = Path(tempfile.gettempdir()) / f"ffjobs-test-identity-{os.getpid()}.pt"
    if not out.exists():
        from ffjobs.data.synth import generate_dataset
        from ffjobs.models.identity_pretrain import train_identity_encoder

        model = load_config("local", [f"{key}" for key in TINY_MODEL]).model
        with tempfile.TemporaryDirectory() as tmp:
            data = generate_dataset(Path(tmp) / "faces", identities=24, per_identity=8, size=64)
            partial = out.with_suffix(".partial")
            train_identity_encoder(model, data, partial)
            partial.replace(out)
    return str(out)


def tiny_config(tmp_path: Path, *overrides: str) -> Config:
    """64 px model, fp32, deterministic kernels, no tracking, checkpoints under ``tmp_path``."""
    return load_config(
        "local",
        [
            *TINY_MODEL,
            "train.batch_size=2",
            "train.steps=4",
            "train.log_every=2",
            "train.checkpoint_every=2",
            "train.deterministic=true",
            "train.precision=fp32",
            f"train.checkpoint_dir={tmp_path / 'ckpt'}",
            f"model.identity_weights={tiny_identity_weights()}",
            "train.progress=false",
            "tracking.enabled=false",
            *overrides,
        ],
    )


def final_weights(checkpoint_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Generator, discriminator and EMA weights of the newest checkpoint in ``checkpoint_dir``."""
    newest = sorted(Path(checkpoint_dir).glob("step-*.pt"))[-1]
    state = torch.load(newest, weights_only=True)
    return {
        "step": state["step"],
        "generator": state["generator"],
        "discriminator": state["discriminator"],
        "ema": state["ema"],
    }
