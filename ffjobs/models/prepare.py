"""Make the local demo self-contained: the synthetic dataset (:mod:`ffjobs.data.demo`) and an
identity encoder pre-trained on it, on demand."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from ffjobs.config import Config
from ffjobs.data.demo import ensure_demo_dataset, ensure_identity_dataset
from ffjobs.models.identity_pretrain import IdentityPretrainResult, train_identity_encoder

DEFAULT_PRETRAIN_STEPS = 300


def ensure_identity_weights(
    config: Config,
    *,
    steps: int = DEFAULT_PRETRAIN_STEPS,
    on_step: Callable[[int, float], None] | None = None,
) -> IdentityPretrainResult | None:
    """Train the project's encoder into ``model.identity_weights`` if that file does not exist.

    Made once however many processes ask at the same time (written aside, then renamed into
    place; the others wait and use it: :func:`ffjobs.shared_inputs.make_once`). Returns the
    training result, or ``None`` when nothing was needed (no weights configured, the file is
    already there, or another process made it meanwhile).
    """
    weights = config.model.identity_weights
    if not weights or Path(weights).exists():
        return None
    from ffjobs.shared_inputs import make_once

    made: list[IdentityPretrainResult] = []

    def make(path: Path) -> None:
        data = ensure_identity_dataset(config)
        print(f"pre-training the identity encoder into {weights}", file=sys.stderr, flush=True)
        result = train_identity_encoder(
            config.model, data, path, steps=steps, seed=config.train.seed, on_step=on_step
        )
        made.append(dataclasses.replace(result, out=str(weights)))

    make_once(weights, make, what="the identity encoder")
    return made[0] if made else None


def ensure_demo_inputs(config: Config) -> None:
    """What training on the embedded default needs: the synthetic dataset (see
    :func:`ffjobs.data.demo.ensure_demo_dataset`) and the identity encoder pre-trained into
    ``model.identity_weights`` when that file is missing (nothing is downloaded)."""
    ensure_demo_dataset(config)
    ensure_identity_weights(config)
