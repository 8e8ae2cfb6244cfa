"""The sample grid a reviewer looks at: one column per pair, a labelled row each (source,
target, fused, the champion's fused), tiles large enough to judge a face, and under each fused
face its identity score (cosine to its source's real embedding)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

MIN_TILE = 128
"""Pixels of a tile's side at least: a 64 px face is upscaled (nearest: no detail invented)."""
LABEL_WIDTH = 96
PAD = 4
CAPTION = 16


@dataclass
class SampleRow:
    label: str
    images: Tensor
    """``(K, 3, H, W)`` in [-1, 1]."""
    captions: Sequence[str] = field(default_factory=tuple)
    """One short line under each image (empty: none)."""


def save_sample_grid(rows: Sequence[SampleRow], path: str | Path) -> Path:
    """Write ``rows`` as one PNG: the row's label on the left, its images in columns."""
    from PIL import Image, ImageDraw, ImageFont

    columns = len(rows[0].images)
    side = rows[0].images.shape[-1]
    tile = side * max(1, -(-MIN_TILE // side))  # a whole multiple: crisp pixels
    row_height = tile + CAPTION + PAD
    width = LABEL_WIDTH + columns * (tile + PAD) + PAD
    sheet = Image.new("RGB", (width, PAD + len(rows) * row_height), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=13)  # Pillow's own font: nothing to install
    for r, row in enumerate(rows):
        top = PAD + r * row_height
        draw.text((PAD, top + tile // 2 - 7), row.label, fill="black", font=font)
        for c, picture in enumerate(_pictures(row.images, tile)):
            left = LABEL_WIDTH + c * (tile + PAD)
            sheet.paste(picture, (left, top))
            if c < len(row.captions) and row.captions[c]:
                draw.text((left + 2, top + tile + 1), row.captions[c], fill="black", font=font)
    sheet.save(path)
    return Path(path)


def _pictures(images: Tensor, tile: int):
    from PIL import Image

    scaled = F.interpolate(images.float(), size=(tile, tile), mode="nearest")
    pixels = ((scaled.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    for image in pixels.permute(0, 2, 3, 1).cpu().numpy():
        yield Image.fromarray(image)


def identity_captions(scores: Tensor) -> list[str]:
    """``id 0.42`` per pair: the fused face's cosine to its source's identity."""
    return [f"id {float(score):.2f}" for score in scores]
