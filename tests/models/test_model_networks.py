"""Shapes, ranges and wiring of the generator, the discriminator and the frozen identity encoder."""

from __future__ import annotations

import pytest
import torch
from model_test_helpers import well_conditioned

from ffjobs.models import ModelConfig, build, build_discriminator, build_generator
from ffjobs.models.generator import AdaptiveInstanceNorm
from ffjobs.models.identity import (
    IdentityEncoder,
    build_identity_backbone,
    build_identity_encoder,
    calibrate_batchnorm,
)
from ffjobs.models.iresnet import iresnet


def _small(resolution: int, **changes) -> ModelConfig:
    fields = dict(
        resolution=resolution,
        width=8,
        max_width=32,
        downsamplings=3,
        residual_blocks=1,
        discriminator_width=8,
        identity_dim=32,
    )
    fields.update(changes)
    return ModelConfig(**fields)


@pytest.mark.parametrize("resolution", [64, 128, 256])
def test_shapes_at_each_resolution(resolution):
    cfg = _small(resolution)
    generator, discriminator, encoder = build(cfg)
    images = torch.rand(2, 3, resolution, resolution) * 2 - 1
    embedding = encoder(images)
    fused = generator(images, embedding)
    outputs = discriminator(fused)

    assert embedding.shape == (2, cfg.identity_dim)
    assert fused.shape == images.shape
    assert fused.abs().max() <= 1.0
    assert len(outputs) == cfg.discriminator_scales == 2
    # full-resolution scale: 3 stride-2 blocks -> /8; the next scale works on a half-size copy
    assert outputs[0].logits.shape == (2, 1, resolution // 8, resolution // 8)
    assert outputs[1].logits.shape == (2, 1, resolution // 16, resolution // 16)
    assert [f.shape[1] for f in outputs[0].features] == [8, 16, 32, 64]


@pytest.mark.parametrize("upsampling", ["nearest", "bilinear", "transposed"])
@pytest.mark.parametrize("padding", ["zeros", "reflect"])
def test_generator_options_keep_shape_and_channels_last(upsampling, padding):
    cfg = _small(64, upsampling=upsampling, padding=padding, generator_norm="none")
    generator = build_generator(cfg).to(memory_format=torch.channels_last)
    target = torch.rand(2, 3, 64, 64).to(memory_format=torch.channels_last)
    fused = generator(target, torch.randn(2, cfg.identity_dim))
    assert fused.shape == (2, 3, 64, 64)
    fused.mean().backward()
    assert all(p.grad is not None for p in generator.parameters())


def test_fused_output_depends_on_source_embedding():
    cfg = _small(64)
    generator = build_generator(cfg)
    target = torch.rand(1, 3, 64, 64)
    a = generator(target, torch.randn(1, cfg.identity_dim))
    b = generator(target, torch.randn(1, cfg.identity_dim))
    assert (a - b).abs().mean() > 1e-4


def test_a_random_identity_encoder_holds_its_own_activation_statistics():
    # Fresh batch norms (mean 0, variance 1) let each block of a random iresnet50 multiply its
    # input (4e9 here, 1e26 at full width); calibrated on its own activations, as training
    # would leave them, the embeddings stay of the order of one.
    cfg = _small(64, identity_arch="iresnet50", identity_width=0.25, identity_input_size=32)
    images = torch.rand(4, 3, 64, 64) * 2 - 1
    torch.manual_seed(0)
    uncalibrated = IdentityEncoder(build_identity_backbone(cfg), cfg.identity_input_size)
    after_backbone = torch.rand(1)
    torch.manual_seed(0)
    encoder = build_identity_encoder(cfg)
    assert torch.rand(1) == after_backbone  # its images do not draw from the global stream
    assert uncalibrated(images).abs().max() > 1e6
    assert encoder(images).abs().max() < 100


def test_calibration_draws_the_same_images_inside_a_default_device_context():
    # The trainer builds its models inside `with device:`; there a host generator cannot draw
    # on the GPU (a CUDA error), and on the meta device it draws shapes without values. Meta
    # stands in for the GPU here: the statistics must be those of a build outside any context,
    # bit for bit (same images, same weights, same kernels).
    cfg = _small(64, identity_arch="iresnet50", identity_width=0.25, identity_input_size=32)
    torch.manual_seed(0)
    plain = calibrate_batchnorm(build_identity_backbone(cfg), cfg.identity_input_size)
    torch.manual_seed(0)
    backbone = build_identity_backbone(cfg)
    with torch.device("meta"):
        calibrate_batchnorm(backbone, cfg.identity_input_size)
    for key, value in plain.state_dict().items():
        assert torch.equal(backbone.state_dict()[key], value), key


def test_generator_conditions_on_the_direction_of_any_embedding():
    # A random frozen iresnet50 embeds at about 1e26 (squares overflow float32): the generator
    # still sees the embedding's direction, not the zeros a plain normalisation returns.
    cfg = _small(64)
    generator = build_generator(cfg)
    target = torch.rand(1, 3, 64, 64)
    embedding = torch.randn(1, cfg.identity_dim)
    huge = generator(target, embedding * 1e26)
    # scaling rounds each entry once (relative 6e-8); the unit vector and the fused image
    # move by float32 rounding only, three orders below the tolerance
    torch.testing.assert_close(huge, generator(target, embedding), rtol=0, atol=1e-4)
    assert (huge - generator(target, torch.zeros_like(embedding))).abs().mean() > 1e-4


def test_adain_matches_instance_norm_with_style():
    module = AdaptiveInstanceNorm(channels=4, identity_dim=6)
    x, embedding = torch.randn(3, 4, 5, 5), torch.randn(3, 6)
    gamma, beta = module.style(embedding).chunk(2, dim=1)
    expected = (
        torch.nn.functional.instance_norm(x) * (1 + gamma[..., None, None]) + beta[..., None, None]
    )
    torch.testing.assert_close(module(x, embedding), expected, rtol=1e-4, atol=1e-5)


def test_discriminator_has_no_batch_statistics():
    # Per-rank batch statistics would break DDP equivalence (2 ranks x b == 1 rank x 2b).
    discriminator = build_discriminator(_small(64, discriminator_norm="instance"))
    assert not any(
        isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in discriminator.modules()
    )
    images = torch.randn(4, 3, 64, 64)
    whole = discriminator(images)[0].logits
    halves = torch.cat([discriminator(images[:2])[0].logits, discriminator(images[2:])[0].logits])
    torch.testing.assert_close(whole, halves)


def test_identity_encoder_is_frozen_but_passes_gradients():
    encoder = build_identity_encoder(ModelConfig())
    encoder.train()
    assert not encoder.training and not encoder.backbone.training
    assert not any(p.requires_grad for p in encoder.parameters())
    images = torch.rand(2, 3, 48, 48, requires_grad=True)  # resized to identity_input_size
    encoder(images).sum().backward()
    assert images.grad is not None and images.grad.abs().sum() > 0
    before = encoder.backbone.layer1[0].bn1.running_mean.clone()
    encoder(torch.rand(2, 3, 64, 64))
    assert torch.equal(before, encoder.backbone.layer1[0].bn1.running_mean)


def test_folding_batchnorm_keeps_embeddings_and_removes_passes():
    torch.manual_seed(0)
    backbone = well_conditioned(iresnet("iresnet18", width=0.25, input_size=64, embedding_dim=32))
    images = torch.rand(2, 3, 64, 64) * 2 - 1
    expected = backbone.eval()(images)
    folded = IdentityEncoder(backbone, 64)
    torch.testing.assert_close(folded(images), expected, rtol=1e-3, atol=1e-4)
    norms = [m for m in folded.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert len(norms) == 8  # only the pre-conv norm of each of the 8 blocks remains


def test_256_preset_is_simswap_sized():
    from ffjobs.config import load_config

    cfg = load_config("train-256").model
    with torch.device("meta"):
        generator = build_generator(cfg)
    parameters = sum(p.numel() for p in generator.parameters())
    assert 50e6 < parameters < 60e6  # reference SimSwap-style generator: 55 M


def test_bf16_autocast_channels_last_step_is_finite_and_keeps_layout():
    cfg = _small(64)
    generator, discriminator, encoder = (
        m.to(memory_format=torch.channels_last) for m in build(cfg)
    )
    target = (torch.rand(2, 3, 64, 64) * 2 - 1).to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = generator(target, encoder(target))
        score = discriminator(fused)[0].logits.float().mean() + encoder(fused).float().mean()
    assert fused.dtype == torch.bfloat16
    assert fused.is_contiguous(memory_format=torch.channels_last)
    score.backward()
    assert all(torch.isfinite(p.grad).all() for p in generator.parameters())
