"""Face-fusion networks: generator, multi-scale discriminator, frozen identity encoder, losses.

Entry point for the trainer::

    from ffjobs.models import build
    models = build(cfg.model)          # FusionModels(generator, discriminator, identity_encoder)
    fused = models.generator(target, models.identity_encoder(source))

See :mod:`ffjobs.models.losses` for the loss API and :mod:`ffjobs.models.flops` for the FLOP
count per training image.
"""

from __future__ import annotations

import importlib
from typing import Any

# Resolved on first use (PEP 562), so that loading a config never imports torch.
_EXPORTS = {
    "DiscriminatorOutput": "ffjobs.models.discriminator",
    "MultiScaleDiscriminator": "ffjobs.models.discriminator",
    "Generator": "ffjobs.models.generator",
    "IdentityEncoder": "ffjobs.models.identity",
    "IdentityWeightsError": "ffjobs.models.identity",
    "build_identity_encoder": "ffjobs.models.identity",
    "LossWeights": "ffjobs.config.model",
    "ModelConfig": "ffjobs.config.model",
    "FusionModels": "ffjobs.models.factory",
    "build": "ffjobs.models.factory",
    "build_discriminator": "ffjobs.models.factory",
    "build_generator": "ffjobs.models.factory",
}

__all__ = [
    "DiscriminatorOutput",
    "FusionModels",
    "Generator",
    "IdentityEncoder",
    "IdentityWeightsError",
    "LossWeights",
    "ModelConfig",
    "MultiScaleDiscriminator",
    "build",
    "build_discriminator",
    "build_generator",
    "build_identity_encoder",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ffjobs.models' has no attribute {name!r}")
