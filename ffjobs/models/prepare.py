"""Make the local demo self-contained: the synthetic dataset and an identity encoder on demand."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from ffjobs.config import Config
from ffjobs.data.config import DataConfig
from ffjobs.errors import UserError
from ffjobs.models.identity_pretrain import IdentityPretrainResult, train_identity_encoder

DEFAULT_PRETRAIN_STEPS = 300


def ensure_identity_dataset(config: Config) -> Path:
    """``data.source`` as a local directory. At the default path it is the synthetic set,
    generated unless a complete one is there (made once, whoever else asks meanwhile: see
    :func:`ffjobs.data.synth.ensure_dataset`); any other path is the user's and must exist."""
    source = Path(config.data.source)
    if config.data.source != DataConfig().source:
        if source.is_dir() and any(source.iterdir()):
            return source
        raise UserError(
            f"data.source: {source} is not a directory with identity folders; point data.source "
            f"at one or leave it at the default {DataConfig().source} to generate synthetic faces"
        )
    from ffjobs.data.synth import ensure_dataset

    synth = config.data.synth
    return ensure_dataset(
        source,
        identities=synth.identities,
        per_identity=synth.per_identity,
        size=synth.size,
        seed=synth.seed,
    )


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


def ensure_demo_dataset(config: Config) -> None:
    """Generate the synthetic dataset when ``data.source`` is the default path and no complete
    one is there (any other source is the user's, and is never written to)."""
    if config.data.source == DataConfig().source:
        ensure_identity_dataset(config)


def ensure_demo_inputs(config: Config) -> None:
    """What training on the embedded default needs: the synthetic dataset (see
    :func:`ensure_demo_dataset`) and the identity encoder pre-trained into
    ``model.identity_weights`` when that file is missing (nothing is downloaded)."""
    ensure_demo_dataset(config)
    ensure_identity_weights(config)
