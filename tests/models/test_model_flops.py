"""FLOPs per training image: counted on meta tensors, equal to a real run, SimSwap-sized at 256."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ffjobs.cli import main
from ffjobs.config import load_config
from ffjobs.models import ModelConfig, build
from ffjobs.models.flops import training_flops_per_image, training_step_flops


def test_meta_count_equals_the_count_of_a_real_forward_backward():
    cfg = ModelConfig(width=8, discriminator_width=8, identity_dim=32)
    generator, discriminator, encoder = build(cfg)
    images = torch.rand(2, 3, 64, 64)
    with FlopCounterMode(display=False) as counter:
        with torch.no_grad():
            embedding = encoder(images)
        generator(images, embedding).mean().backward()
    generator_only = counter.get_total_flops()
    step = training_step_flops(cfg, batch_size=2)
    # the full step also runs D (3 forwards, 2 backwards) and the encoder on fused images
    assert step > generator_only > 0
    assert training_flops_per_image(cfg) == pytest.approx(step / 2)


def test_flops_grow_with_resolution_and_256_preset_matches_reference():
    small = training_flops_per_image(ModelConfig())
    preset = training_flops_per_image(load_config("train-256").model)
    assert preset > 50 * small
    # reference SimSwap-style step at 256 px (shared measurements): 494 GFLOP per image
    assert 0.8 * 494e9 < preset < 1.2 * 494e9


def test_cli_models_info_json(capsys):
    assert main(["models", "info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["training_flops_per_image"] > 0
    assert set(report["parameters"]) == {"generator", "discriminator", "identity_encoder"}
