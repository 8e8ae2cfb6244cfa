"""The sample grid a reviewer looks at: one column per pair, rows source | target | fused."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor


def save_sample_grid(rows: list[Tensor], path: str | Path) -> Path:
    """Write ``rows`` (each ``(K, 3, H, W)`` in [-1, 1]: sources, targets, fused, ...) as one
    PNG, a row each."""
    from torchvision.utils import make_grid, save_image

    columns = len(rows[0])
    grid = make_grid(torch.cat(rows), nrow=columns, padding=2, normalize=True, value_range=(-1, 1))
    save_image(grid, path)
    return Path(path)
