"""Make the local demo self-contained: the synthetic dataset and an identity encoder on demand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ffjobs.config import Config
from ffjobs.data.config import DataConfig
from ffjobs.errors import UserError
from ffjobs.models.identity_pretrain import IdentityPretrainResult, train_identity_encoder

DEFAULT_PRETRAIN_STEPS = 300


def ensure_identity_dataset(config: Config) -> Path:
    """``data.source`` as a local directory; the synthetic set is generated if it is the default."""
    source = Path(config.data.source)
    if source.is_dir() and any(source.iterdir()):
        return source
    if config.data.source != DataConfig().source:
        raise UserError(
            f"data.source: {source} is not a directory with identity folders; point data.source "
            f"at one or leave it at the default {DataConfig().source} to generate synthetic faces"
        )
    from ffjobs.data.synth import generate_dataset

    synth = config.data.synth
    return generate_dataset(
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

    Returns the training result, or ``None`` when nothing was needed (no weights configured,
    or the file is already there).
    """
    weights = config.model.identity_weights
    if not weights or Path(weights).exists():
        return None
    data = ensure_identity_dataset(config)
    return train_identity_encoder(
        config.model, data, weights, steps=steps, seed=config.train.seed, on_step=on_step
    )


def ensure_demo_dataset(config: Config) -> None:
    """Generate the synthetic dataset when ``data.source`` is the default path and missing
    (any other source is the user's, and is never written to)."""
    if config.data.source == DataConfig().source:
        ensure_identity_dataset(config)


def ensure_demo_inputs(config: Config) -> None:
    """What training on the embedded default needs: the synthetic dataset (see
    :func:`ensure_demo_dataset`) and the identity encoder pre-trained into
    ``model.identity_weights`` when that file is missing (nothing is downloaded)."""
    import sys

    ensure_demo_dataset(config)
    if config.model.identity_weights and not Path(config.model.identity_weights).exists():
        print(
            f"pre-training the identity encoder into {config.model.identity_weights}",
            file=sys.stderr,
        )
        ensure_identity_weights(config)
