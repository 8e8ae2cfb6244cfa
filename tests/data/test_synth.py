"""The synthetic dataset is deterministic, fast, and carries identity."""

from __future__ import annotations

import time

import numpy as np
from PIL import Image

from ffjobs.data.synth import generate_dataset


def test_deterministic_and_fast(tmp_path):
    started = time.perf_counter()
    a = generate_dataset(tmp_path / "a", identities=24, per_identity=8, size=64, seed=5)
    assert time.perf_counter() - started < 5.0
    b = generate_dataset(tmp_path / "b", identities=3, per_identity=2, size=64, seed=5)
    assert (a / "id_0002" / "01.jpg").read_bytes() == (b / "id_0002" / "01.jpg").read_bytes()
    c = generate_dataset(tmp_path / "c", identities=3, per_identity=2, size=64, seed=6)
    assert (a / "id_0002" / "01.jpg").read_bytes() != (c / "id_0002" / "01.jpg").read_bytes()
    assert len(list(a.glob("*/*.jpg"))) == 192


def test_images_of_one_identity_are_closer_than_across(tmp_path):
    """Face pixels (centre crop) of one identity share colouring: a crude identity signal."""
    root = generate_dataset(
        tmp_path / "d", identities=8, per_identity=6, size=64, seed=0, image_format="png"
    )

    def centre(path):
        array = np.asarray(Image.open(path), dtype=np.float32)
        return array[24:40, 24:40].reshape(-1, 3).mean(0)

    features = {p: centre(p) for p in sorted(root.glob("*/*.png"))}
    within, across = [], []
    paths = list(features)
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            distance = float(np.linalg.norm(features[a] - features[b]))
            (within if a.parent == b.parent else across).append(distance)
    assert np.median(within) < 0.7 * np.median(across)
