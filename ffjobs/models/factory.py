"""Build the three face-fusion networks from a :class:`ModelConfig`."""

from __future__ import annotations

from typing import NamedTuple

from ffjobs.config.model import ModelConfig
from ffjobs.models.discriminator import MultiScaleDiscriminator
from ffjobs.models.generator import Generator
from ffjobs.models.identity import IdentityEncoder, build_identity_encoder


class FusionModels(NamedTuple):
    generator: Generator
    discriminator: MultiScaleDiscriminator
    identity_encoder: IdentityEncoder


def build_generator(cfg: ModelConfig) -> Generator:
    """The generator ``cfg`` describes: ``generator(target, source_embedding) -> fused``."""
    return Generator(cfg)


def build_discriminator(cfg: ModelConfig) -> MultiScaleDiscriminator:
    """The multi-scale PatchGAN ``cfg`` describes: ``discriminator(images) -> [outputs]``."""
    return MultiScaleDiscriminator(cfg)


def build(cfg: ModelConfig, *, load_identity_weights: bool = True) -> FusionModels:
    """Build all three networks on the current default device (CPU unless changed).

    The identity encoder is frozen and loads ``cfg.identity_weights`` when set (and
    ``load_identity_weights``); a bad file raises :class:`IdentityWeightsError`.
    """
    return FusionModels(
        build_generator(cfg),
        build_discriminator(cfg),
        build_identity_encoder(cfg, load_weights=load_identity_weights),
    )
