"""The face-swap model as one module: ``FaceSwap(source, target) -> fused``.

The generator alone takes a target image and a source *embedding*; what a user, an evaluation
and the model registry handle is the pair "generator + the identity encoder it was trained
with". :class:`FaceSwap` bundles them, so evaluating, registering and trying a model all run
the same forward. Images are ``(N, 3, H, W)`` floats in ``[-1, 1]`` at the model's resolution.

:func:`ffjobs.train.swap.face_swap_from_checkpoint` builds it from a run's latest verified
checkpoint (the EMA generator: the weights a training run produces for use).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ffjobs.config.model import ModelConfig
from ffjobs.models.factory import build_generator
from ffjobs.models.identity import IdentityEncoder, build_identity_encoder


class FaceSwap(nn.Module):
    """Generator + its frozen identity encoder; see the module docstring."""

    def __init__(self, generator: nn.Module, identity_encoder: IdentityEncoder, resolution: int):
        super().__init__()
        self.generator = generator.eval().requires_grad_(False)
        self.identity_encoder = identity_encoder
        self.resolution = resolution
        self.eval()

    def train(self, mode: bool = True) -> FaceSwap:
        """Always in eval mode: a trained model for use, not for training."""
        return super().train(False)

    @torch.no_grad()
    def forward(self, source: Tensor, target: Tensor) -> Tensor:
        return self.generator(target, self.identity_encoder(source))


def build_face_swap(cfg: ModelConfig) -> FaceSwap:
    """The FaceSwap ``cfg`` describes, with weights still to be loaded (a registered model's):
    ``cfg.identity_weights`` is not read, the state dict brings the encoder's weights too."""
    generator = build_generator(cfg)
    return FaceSwap(generator, build_identity_encoder(cfg, load_weights=False), cfg.resolution)
