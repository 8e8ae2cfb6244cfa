"""Exponential moving average of the generator's weights, updated without host syncs.

torch's ``AveragedModel`` checks its step counter on the host every update, which blocks the
CPU on the GPU once per step; here one fused ``lerp`` over all tensors runs on the device.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class GeneratorEMA(nn.Module):
    """``ema = decay * ema + (1 - decay) * weights`` after every optimizer step.

    Starts as a copy of the model; buffers (none in the generator today) are copied as they are.
    ``state_dict()`` is the averaged model's own, so it loads straight into a generator.
    """

    def __init__(self, model: nn.Module, decay: float):
        super().__init__()
        self.decay = decay
        self.module = copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        averaged = list(self.module.parameters())
        current = [p.detach() for p in model.parameters()]
        torch._foreach_lerp_(averaged, current, 1.0 - self.decay)
        for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
            mine.copy_(theirs)

    def state_dict(self, *args, **kwargs):  # the generator's layout, no "module." prefix
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)
