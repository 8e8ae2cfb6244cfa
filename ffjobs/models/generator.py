"""SimSwap-style generator: encode the target, inject the source identity, decode.

Signature: ``generator(target, source_embedding) -> fused``

* ``target``: ``(N, 3, H, W)`` float images in ``[-1, 1]`` (``H == W == ModelConfig.resolution``);
* ``source_embedding``: ``(N, identity_dim)`` identity embeddings of the source faces (raw
  identity-encoder output; the generator L2-normalises them itself);
* ``fused``: ``(N, 3, H, W)`` in ``[-1, 1]`` (tanh), carrying the source identity and the
  target's pose, expression and lighting.

GPU notes: every block is plain conv + per-sample normalisation, so it runs in channels_last;
the AdaIN modulation folds instance-norm statistics and the style into one ``scale``/``shift``
pair and applies it in a single ``addcmul`` pass over the activations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ffjobs.config.model import ModelConfig
from ffjobs.models.numerics import at_least_float32, unit_rows


def _normalise_and_modulate(x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Tensor:
    """``(x - mean) * rstd * gamma + beta`` per sample and channel, as one pass over ``x``.

    Statistics come from one ``var_mean`` read; the per-channel ``scale``/``shift`` are tiny
    float32 tensors (float64 in a float64 model); the single ``addcmul`` keeps the memory layout
    (channels_last stays channels_last, unlike ``F.instance_norm``, which reshapes and copies).
    """
    var, mean = torch.var_mean(x, dim=(2, 3), keepdim=True, correction=0)
    scale = gamma * torch.rsqrt(at_least_float32(var) + eps)
    shift = beta - at_least_float32(mean) * scale
    return torch.addcmul(shift.to(x.dtype), x, scale.to(x.dtype))


class InstanceNorm(nn.Module):
    """Affine instance norm (same parameters and maths as ``nn.InstanceNorm2d(affine=True)``)."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        gamma = at_least_float32(self.weight)[None, :, None, None]
        beta = at_least_float32(self.bias)[None, :, None, None]
        return _normalise_and_modulate(x, gamma, beta, self.eps)


def _norm(kind: str, channels: int) -> nn.Module:
    return InstanceNorm(channels) if kind == "instance" else nn.Identity()


class AdaptiveInstanceNorm(nn.Module):
    """Instance norm whose scale and shift come from the identity embedding (AdaIN)."""

    def __init__(self, channels: int, identity_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.style = nn.Linear(identity_dim, 2 * channels)

    def forward(self, x: Tensor, embedding: Tensor) -> Tensor:
        gamma, beta = at_least_float32(self.style(embedding))[:, :, None, None].chunk(2, dim=1)
        return _normalise_and_modulate(x, 1.0 + gamma, beta, self.eps)


class ModulatedResidualBlock(nn.Module):
    """conv -> AdaIN -> ReLU -> conv -> AdaIN, plus the skip connection."""

    def __init__(self, channels: int, identity_dim: int, padding_mode: str):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, padding_mode=padding_mode)
        self.mod1 = AdaptiveInstanceNorm(channels, identity_dim)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, padding_mode=padding_mode)
        self.mod2 = AdaptiveInstanceNorm(channels, identity_dim)

    def forward(self, x: Tensor, embedding: Tensor) -> Tensor:
        h = F.relu(self.mod1(self.conv1(x), embedding), inplace=True)
        return x + self.mod2(self.conv2(h), embedding)


class NearestUpsample2x(nn.Module):
    """``nn.Upsample(scale_factor=2, mode="nearest")`` as a broadcast of each pixel to 2x2.

    Same values, same memory format out as in; the difference is the backward: a broadcast's
    gradient sums each 2x2 block (one reduction pass), where ``upsample_nearest2d``'s scatters
    every gradient element with an atomic add (the slowest kernels of the compiled step).
    """

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            pixels = x.permute(0, 2, 3, 1)[:, :, None, :, None, :]  # NHWC, as stored
            up = pixels.expand(n, h, 2, w, 2, c).reshape(n, 2 * h, 2 * w, c)
            return up.permute(0, 3, 1, 2)
        return x[:, :, :, None, :, None].expand(n, c, h, 2, w, 2).reshape(n, c, 2 * h, 2 * w)


def _upsample(kind: str, in_ch: int, out_ch: int, padding_mode: str) -> nn.Module:
    if kind == "transposed":
        return nn.ConvTranspose2d(in_ch, out_ch, 4, stride=2, padding=1)
    scale = (
        NearestUpsample2x()
        if kind == "nearest"
        else nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    )
    return nn.Sequential(scale, nn.Conv2d(in_ch, out_ch, 3, padding=1, padding_mode=padding_mode))


class Generator(nn.Module):
    """Encoder -> identity-modulated residual bottleneck -> decoder; see the module docstring."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pad = cfg.padding
        widths = [min(cfg.width * 2**i, cfg.max_width) for i in range(cfg.downsamplings + 1)]
        self.resolution = cfg.resolution
        self.identity_dim = cfg.identity_dim

        encoder: list[nn.Module] = [
            nn.Conv2d(3, widths[0], 7, padding=3, padding_mode=pad),
            _norm(cfg.generator_norm, widths[0]),
            nn.ReLU(inplace=True),
        ]
        for in_ch, out_ch in zip(widths[:-1], widths[1:], strict=True):
            encoder += [
                nn.Conv2d(in_ch, out_ch, 3, stride=2, padding=1, padding_mode=pad),
                _norm(cfg.generator_norm, out_ch),
                nn.ReLU(inplace=True),
            ]
        self.encoder = nn.Sequential(*encoder)

        self.bottleneck = nn.ModuleList(
            ModulatedResidualBlock(widths[-1], cfg.identity_dim, pad)
            for _ in range(cfg.residual_blocks)
        )

        decoder: list[nn.Module] = []
        for in_ch, out_ch in zip(widths[:0:-1], widths[-2::-1], strict=True):
            decoder += [
                _upsample(cfg.upsampling, in_ch, out_ch, pad),
                _norm(cfg.generator_norm, out_ch),
                nn.ReLU(inplace=True),
            ]
        decoder += [nn.Conv2d(widths[0], 3, 7, padding=3, padding_mode=pad), nn.Tanh()]
        self.decoder = nn.Sequential(*decoder)

    def forward(self, target: Tensor, source_embedding: Tensor) -> Tensor:
        embedding = unit_rows(source_embedding).to(source_embedding.dtype)
        h = self.encoder(target)
        for block in self.bottleneck:
            h = block(h, embedding)
        return self.decoder(h)
