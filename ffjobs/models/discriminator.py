"""Multi-scale PatchGAN discriminator that also returns its intermediate features.

``discriminator(images) -> list[DiscriminatorOutput]``, one entry per scale (full resolution
first, then average-pooled by 2 each scale); ``DiscriminatorOutput.logits`` is the
``(N, 1, h, w)`` patch map and ``.features`` the activations after each block (the last one is
what feature matching uses).

No batch norm here on purpose: batch statistics are per rank, so with batch norm 2 ranks x b
would not train like 1 rank x 2b. The default is no normalisation at all (the cheapest on
GPU); ``instance`` is per sample and keeps that equivalence too.
"""

from __future__ import annotations

from typing import NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from ffjobs.config.model import ModelConfig

_MAX_WIDTH = 512


class DiscriminatorOutput(NamedTuple):
    logits: Tensor
    """``(N, 1, h, w)`` real/fake scores, one per patch."""
    features: list[Tensor]
    """Activations after each block, shallow to deep."""


def _block(in_ch: int, out_ch: int, stride: int, norm: str) -> nn.Sequential:
    kernel = 4 if stride == 2 else 3
    layers: list[nn.Module] = [nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=1)]
    if norm == "instance":
        layers.append(nn.InstanceNorm2d(out_ch, affine=True))
    layers.append(nn.LeakyReLU(0.2, inplace=True))
    return nn.Sequential(*layers)


class PatchDiscriminator(nn.Module):
    """One PatchGAN: ``layers`` stride-2 blocks, one stride-1 block, a 1-channel head."""

    def __init__(self, width: int, layers: int, norm: str):
        super().__init__()
        blocks = [_block(3, width, 2, "none")]  # no norm on the first block (pix2pix habit)
        channels = width
        for _ in range(layers - 1):
            wider = min(channels * 2, _MAX_WIDTH)
            blocks.append(_block(channels, wider, 2, norm))
            channels = wider
        blocks.append(_block(channels, min(channels * 2, _MAX_WIDTH), 1, norm))
        channels = min(channels * 2, _MAX_WIDTH)
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Conv2d(channels, 1, 3, padding=1)

    def forward(self, images: Tensor) -> DiscriminatorOutput:
        features = []
        h = images
        for block in self.blocks:
            h = block(h)
            features.append(h)
        return DiscriminatorOutput(self.head(h), features)


class MultiScaleDiscriminator(nn.Module):
    """``scales`` PatchGANs on progressively average-pooled copies of the input."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.scales = nn.ModuleList(
            PatchDiscriminator(
                cfg.discriminator_width, cfg.discriminator_layers, cfg.discriminator_norm
            )
            for _ in range(cfg.discriminator_scales)
        )

    def forward(self, images: Tensor) -> list[DiscriminatorOutput]:
        outputs = []
        for index, scale in enumerate(self.scales):
            if index:
                images = F.avg_pool2d(images, 3, stride=2, padding=1, count_include_pad=False)
            outputs.append(scale(images))
        return outputs
