"""The precision the models compute their statistics and losses in; unit vectors that never
overflow."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` as float32 if it is of lower precision (bf16/fp16 under autocast), else as it is.

    Norm statistics and losses need float32 under mixed precision; a float64 model (the DDP
    equivalence tests) stays float64 instead of being rounded to float32 there.
    """
    return x if x.dtype == torch.float64 else x.float()


def unit_rows(x: Tensor) -> Tensor:
    """The rows of ``x`` scaled to unit L2 norm, in at least float32, whatever their magnitude.

    Each row is divided by its largest absolute entry before its norm is taken, so the sum of
    squares stays in range: ``F.normalize`` squares first, and a frozen iresnet50 with random
    weights embeds at about 1e26, whose square overflows float32 to inf and normalises to zeros.
    The divisor is detached: the result does not depend on it (normalising is scale-invariant),
    so neither does the gradient. A zero row stays zero.
    """
    x = at_least_float32(x)
    largest = x.detach().abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    return F.normalize(x / largest, dim=1)
