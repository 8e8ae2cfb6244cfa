"""The ground-truth swap of a synthetic evaluation set: the source's person drawn in the
target's pose and lighting, made as the set's own files are."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ffjobs.config import load_config
from ffjobs.data.synth import ensure_dataset, generate_dataset
from ffjobs.quality.evalset import build_evaluation_set
from ffjobs.quality.reference import ground_truth_swaps


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "faces"
    ensure_dataset(out, identities=6, per_identity=3, size=64, seed=3)
    config = load_config("local", [f"data.source={out}", "data.val_fraction=0.5"])
    return config, build_evaluation_set(config)


def test_a_swap_of_an_image_with_itself_is_the_image_bit_for_bit(synthetic):
    # each target as its own source: the drawing must be that very file, decoded the same way,
    # which pins the person, the picture's variation, the seed and the encoding
    config, evalset = synthetic
    selves = dataclasses.replace(evalset, sources=evalset.targets)
    swaps = ground_truth_swaps(config, selves)
    assert isinstance(swaps, torch.Tensor)
    assert torch.equal(swaps, evalset.images[evalset.targets])


def test_each_pair_gets_the_sources_person_in_the_targets_picture(synthetic):
    config, evalset = synthetic
    swaps = ground_truth_swaps(config, evalset)
    assert isinstance(swaps, torch.Tensor)
    assert swaps.shape == (len(evalset.targets), 3, 64, 64)
    # another person than the target's in the same picture: not the target, not the source
    assert not torch.equal(swaps, evalset.images[evalset.targets])
    assert not torch.equal(swaps, evalset.images[evalset.sources])


def test_a_set_the_generator_did_not_make_has_no_ground_truth(tmp_path):
    out = generate_dataset(tmp_path / "faces", identities=4, per_identity=2, size=64)  # no marker
    config = load_config("local", [f"data.source={out}", "data.val_fraction=0.5"])
    reason = ground_truth_swaps(config, build_evaluation_set(config))
    assert reason == f"no ground truth: {out} is not a set the synthetic generator made"
