"""Fixtures of the model tests: a small identity-folder dataset and the configs under test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw


def _write_stand_in_faces(out: Path, identities: int, per_identity: int, size: int, seed: int):
    """Cartoon faces: identity = face shape/colours/eye spacing; per image = pose and light."""
    rng = np.random.default_rng(seed)
    for identity in range(identities):
        skin = rng.integers(80, 230, 3)
        eye = rng.integers(0, 255, 3)
        aspect = rng.uniform(0.65, 0.95)
        spacing = rng.uniform(0.12, 0.24)
        mouth = rng.uniform(0.1, 0.3)
        folder = out / f"id{identity:03d}"
        folder.mkdir(parents=True)
        for index in range(per_identity):
            light = rng.uniform(0.75, 1.15)
            dx, dy = rng.uniform(-0.06, 0.06, 2) * size
            image = Image.new("RGB", (size, size), tuple(int(c) for c in rng.integers(0, 80, 3)))
            draw = ImageDraw.Draw(image)
            cx, cy, r = size / 2 + dx, size / 2 + dy, size * 0.38
            draw.ellipse(
                [cx - r * aspect, cy - r, cx + r * aspect, cy + r],
                fill=tuple(int(min(255, c * light)) for c in skin),
            )
            for side in (-1, 1):
                ex, ey = cx + side * spacing * size, cy - 0.1 * size
                draw.ellipse(
                    [ex - size * 0.05, ey - size * 0.03, ex + size * 0.05, ey + size * 0.03],
                    fill=tuple(int(c) for c in eye),
                )
            open_ = rng.uniform(0.01, 0.06) * size
            draw.rectangle(
                [cx - mouth * size, cy + 0.18 * size, cx + mouth * size, cy + 0.18 * size + open_],
                fill=(120, 30, 40),
            )
            pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, 6, (size, size, 3))
            Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(folder / f"{index:02d}.png")


def make_identity_dataset(
    out: Path, identities: int, per_identity: int, size: int, seed: int = 0
) -> Path:
    """The synthetic identity dataset; the data package's generator when it exists."""
    try:
        from ffjobs.data.synth import generate_dataset
    except ModuleNotFoundError:
        _write_stand_in_faces(out, identities, per_identity, size, seed)
        return out
    return generate_dataset(
        out, identities=identities, per_identity=per_identity, size=size, seed=seed
    )


@pytest.fixture(scope="session")
def identity_dataset(tmp_path_factory) -> Path:
    return make_identity_dataset(tmp_path_factory.mktemp("faces") / "synthetic", 12, 8, 64)
