"""The generator's nearest 2x upsampling is ``F.interpolate(mode="nearest")``, values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ffjobs.models import ModelConfig, build_generator
from ffjobs.models.generator import NearestUpsample2x


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_same_values_gradients_and_memory_format_as_interpolate(memory_format):
    x = torch.randn(2, 5, 3, 4, dtype=torch.float64).to(memory_format=memory_format)
    x.requires_grad_()
    up = NearestUpsample2x()(x)
    reference = F.interpolate(x, scale_factor=2, mode="nearest")
    assert torch.equal(up, reference)  # a broadcast copies values: exact
    assert up.is_contiguous(memory_format=memory_format)
    grad = torch.randn_like(reference)
    (ours,) = torch.autograd.grad(up, x, grad)
    (theirs,) = torch.autograd.grad(reference, x, grad)
    # both sum the same four float64 values per input pixel, maybe in another order
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_generator_keeps_its_state_dict_layout():
    cfg = ModelConfig(width=8, max_width=16, residual_blocks=1, identity_dim=16)
    keys = build_generator(cfg).state_dict().keys()
    assert "decoder.0.1.weight" in keys  # Sequential(upsample, conv): the conv is still index 1
