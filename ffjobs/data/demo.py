"""The demo's dataset: the synthetic identity folders at ``data.source``'s default path, made
on demand (the identity encoder trained on them: :mod:`ffjobs.models.prepare`)."""

from __future__ import annotations

from pathlib import Path

from ffjobs.config import Config
from ffjobs.config.data import DataConfig
from ffjobs.errors import UserError


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


def ensure_demo_dataset(config: Config) -> None:
    """Generate the synthetic dataset when ``data.source`` is the default path and no complete
    one is there (any other source is the user's, and is never written to)."""
    if config.data.source == DataConfig().source:
        ensure_identity_dataset(config)
