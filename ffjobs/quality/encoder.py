"""The recogniser that measures identity in an evaluation, which is not the training loss's.

It is described by ``evaluate.identity_*`` in the same terms as ``model.identity_*`` (an
iresnet of an arch, width, input size and embedding size, arcface_torch layout), so the same
builder, loader and pre-training serve both. At its default path it is the project's own,
pre-trained on ``data.source``'s training identities with another seed, arch and input size
than the training encoder when the file is missing or stale; any other path is the user's and
must exist.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ffjobs.config import Config
from ffjobs.config.evaluate import DEFAULT_EVALUATION_ENCODER
from ffjobs.config.model import ModelConfig
from ffjobs.errors import UserError

if TYPE_CHECKING:
    from ffjobs.models.identity import IdentityEncoder

PRETRAIN_STEPS = 300
"""As many as the demo's training encoder gets (:mod:`ffjobs.models.prepare`)."""


def evaluation_identity_settings(config: Config) -> ModelConfig:
    """``config.model`` with its identity encoder fields replaced by ``evaluate.identity_*``."""
    ev = config.evaluate
    return dataclasses.replace(
        config.model,
        identity_arch=ev.identity_arch,
        identity_width=ev.identity_width,
        identity_input_size=ev.identity_input_size,
        identity_dim=ev.identity_dim,
        identity_weights=ev.identity_weights,
    )


def ensure_evaluation_encoder(config: Config) -> None:
    """Pre-train the project's evaluation encoder, on the training identities only, if it is
    configured at its default path and missing or stale (once, however many processes ask at
    the same time: :func:`ffjobs.models.prepare.ensure_pretrained_encoder`); refuse a user's
    path that does not exist."""
    weights = Path(config.evaluate.identity_weights)
    if not weights.exists() and config.evaluate.identity_weights != DEFAULT_EVALUATION_ENCODER:
        raise UserError(
            f"evaluate.identity_weights: {weights} not found; point it at an arcface_torch "
            "state_dict (with evaluate.identity_width 1.0, identity_input_size 112, identity_dim "
            f"512) or leave it at {DEFAULT_EVALUATION_ENCODER} to pre-train the project's own"
        )
    from ffjobs.models.prepare import ensure_pretrained_encoder

    ensure_pretrained_encoder(
        config,
        evaluation_identity_settings(config),
        seed=config.evaluate.identity_seed,
        what="the evaluation identity encoder",
        steps=PRETRAIN_STEPS,
    )


def load_evaluation_encoder(config: Config) -> IdentityEncoder:
    """The evaluation recogniser, pre-trained first where :func:`ensure_evaluation_encoder`
    says so; a file of another shape is a one-line error naming ``evaluate.identity_*``."""
    ensure_evaluation_encoder(config)
    return build_recogniser(config)


def build_recogniser(config: Config) -> IdentityEncoder:
    """The evaluation recogniser from ``evaluate.identity_weights``, which must be there."""
    from ffjobs.models.identity import build_identity_encoder

    return build_identity_encoder(evaluation_identity_settings(config), section="evaluate")


def describe_evaluation_encoder(config: Config) -> str:
    """What measured identity, in one line (the stage's ``encoder`` fact)."""
    ev = config.evaluate
    return (
        f"{ev.identity_arch} width {ev.identity_width:g}, {ev.identity_input_size} px, "
        f"dim {ev.identity_dim}, weights {ev.identity_weights}"
    )
