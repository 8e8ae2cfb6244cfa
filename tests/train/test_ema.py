"""The generator EMA: the textbook update, and a state dict in the generator's own layout."""

from __future__ import annotations

import torch
from torch import nn

from ffjobs.train.ema import GeneratorEMA


def test_update_is_the_exponential_moving_average():
    model = nn.Linear(3, 2)
    ema = GeneratorEMA(model, decay=0.9)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model)
    expected = 0.9 * start + 0.1 * model.weight.detach()
    torch.testing.assert_close(ema.module.weight, expected)
    assert not ema.module.weight.requires_grad


def test_state_dict_loads_into_a_plain_generator():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    ema = GeneratorEMA(model, decay=0.5)
    ema.update(model)
    fresh = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    fresh.load_state_dict(ema.state_dict())
    restored = GeneratorEMA(fresh, decay=0.5)
    restored.load_state_dict(ema.state_dict())
    for a, b in zip(restored.module.state_dict().values(), ema.state_dict().values(), strict=True):
        assert torch.equal(a, b)
