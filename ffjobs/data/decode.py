"""Image bytes to an RGB uint8 tensor: torchvision's decoder, PIL for what it cannot read."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


def decode_rgb(data: bytes) -> torch.Tensor:
    """``uint8`` tensor ``3 x H x W`` of an image file's bytes (alpha dropped, gray expanded)."""
    from torchvision.io import ImageReadMode, decode_image

    try:
        return decode_image(
            torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB
        )
    except (RuntimeError, ValueError):
        # CMYK JPEGs, 16-bit PNGs and some WebP variants: PIL converts what libjpeg/libpng won't.
        with Image.open(io.BytesIO(data)) as image:
            rgb = np.asarray(image.convert("RGB"))
        return torch.from_numpy(rgb.copy()).permute(2, 0, 1)
