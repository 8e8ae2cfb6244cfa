"""The sample grid: labelled rows, tiles a reviewer can judge, the identity score under each
fused face."""

from __future__ import annotations

import torch
from PIL import Image

from ffjobs.evaluate.samples import (
    LABEL_WIDTH,
    MIN_TILE,
    PAD,
    SampleRow,
    identity_captions,
    save_sample_grid,
)

WHITE = (255, 255, 255)


def _solid(value: float, count: int = 3, side: int = 64) -> torch.Tensor:
    return torch.full((count, 3, side, side), value)


def _ink(grid: Image.Image, box: tuple[int, int, int, int]) -> int:
    """Pixels that are not white inside ``box``: text drawn there."""
    return sum(pixel != WHITE for pixel in grid.crop(box).getdata())


def test_rows_are_labelled_tiles_large_and_fused_faces_scored(tmp_path):
    rows = [
        SampleRow("source", _solid(-1.0)),  # black
        SampleRow("target", _solid(1.0)),  # white
        SampleRow("fused", _solid(0.0), identity_captions(torch.tensor([0.4212, -0.1, 0.9]))),
    ]
    path = save_sample_grid(rows, tmp_path / "samples.png")
    grid = Image.open(path).convert("RGB")
    tile, row_height = MIN_TILE, MIN_TILE + 16 + PAD  # a 64 px face is shown at twice its size
    assert grid.size == (LABEL_WIDTH + 3 * (tile + PAD) + PAD, PAD + 3 * row_height)

    for r in range(3):
        top = PAD + r * row_height
        assert _ink(grid, (0, top, LABEL_WIDTH - PAD, top + tile)) > 0, f"row {r} has no label"
    # the tiles hold the images, upscaled: the source row black, the fused one mid grey
    assert grid.getpixel((LABEL_WIDTH + tile - 1, PAD + tile - 1)) == (0, 0, 0)
    assert grid.getpixel((LABEL_WIDTH + 1, PAD + 2 * row_height + 1)) == (128, 128, 128)
    # a caption under each fused face only
    fused_caption = PAD + 2 * row_height + tile
    assert _ink(grid, (LABEL_WIDTH, fused_caption, LABEL_WIDTH + tile, fused_caption + 16)) > 0
    source_caption = PAD + tile
    assert _ink(grid, (LABEL_WIDTH, source_caption, LABEL_WIDTH + tile, source_caption + 16)) == 0
    assert identity_captions(torch.tensor([0.4212, -0.1])) == ["id 0.42", "id -0.10"]


def test_larger_faces_keep_their_size(tmp_path):
    path = save_sample_grid([SampleRow("source", _solid(0.0, 2, 160))], tmp_path / "s.png")
    assert Image.open(path).size == (LABEL_WIDTH + 2 * (160 + PAD) + PAD, PAD + 160 + 16 + PAD)
