"""Helpers shared by the model tests."""

from __future__ import annotations

import math

import torch
from torch import nn


def well_conditioned(model: nn.Module, seed: int = 0) -> nn.Module:
    """Weights and batch-norm statistics like a trained network's: activations stay O(1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                fan_in = module.weight[0].numel()
                module.weight.normal_(0, 0.5 / math.sqrt(fan_in), generator=generator)
            elif isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5, generator=generator)
                module.running_var.uniform_(0.5, 2.0, generator=generator)
                module.bias.uniform_(-0.3, 0.3, generator=generator)
    return model
