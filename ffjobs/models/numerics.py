"""The precision the models compute their statistics and losses in."""

from __future__ import annotations

import torch
from torch import Tensor


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` as float32 if it is of lower precision (bf16/fp16 under autocast), else as it is.

    Norm statistics and losses need float32 under mixed precision; a float64 model (the DDP
    equivalence tests) stays float64 instead of being rounded to float32 there.
    """
    return x if x.dtype == torch.float64 else x.float()
