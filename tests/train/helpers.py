"""Tiny, deterministic training configs that run in seconds on CPU with gloo."""

from __future__ import annotations

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
