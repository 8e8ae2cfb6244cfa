"""Checkpointer: atomic write, manifest verification, fallback, keep-last-K, RNG round trip."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from ffjobs.train.checkpoint import (
    Checkpointer,
    CheckpointWarning,
    capture_rng_state,
    data_name,
    manifest_name,
    restore_rng_state,
)
from ffjobs.train.checkpoint.storage import LocalStore
from ffjobs.train.faults import corrupt_blob


def _state(value: float) -> dict:
    return {"weights": torch.full((64, 64), value), "meta": {"lr": 1e-3, "name": "x"}}


def _save(ckpt: Checkpointer, step: int) -> None:
    ckpt.save(step, _state(float(step)), {"rng": capture_rng_state()})


def test_save_load_round_trip_with_manifest(tmp_path):
    ckpt = Checkpointer(str(tmp_path), keep=3)
    _save(ckpt, 5)
    manifest = json.loads((tmp_path / manifest_name(5)).read_text())
    assert manifest["size"] == (tmp_path / data_name(5)).stat().st_size
    assert len(manifest["sha256"]) == 64
    ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 5
    state = ckpt.load(ref)
    assert torch.equal(state["weights"], torch.full((64, 64), 5.0))
    assert state["step"] == 5 and len(state["rank_states"]) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_keeps_only_the_last_k(tmp_path):
    ckpt = Checkpointer(str(tmp_path), keep=2)
    for step in (1, 2, 3, 4):
        _save(ckpt, step)
    assert ckpt.steps() == [4, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [data_name(4), manifest_name(4), data_name(3), manifest_name(3)]
    )


@pytest.mark.parametrize("mode", ["truncate", "flip"])
def test_corrupted_newest_falls_back_with_warning_naming_file(tmp_path, mode):
    ckpt = Checkpointer(str(tmp_path), keep=3)
    _save(ckpt, 10)
    _save(ckpt, 20)
    corrupt_blob(LocalStore(tmp_path), data_name(20), mode=mode)
    with pytest.warns(CheckpointWarning, match=data_name(20)):
        ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 10
    assert torch.equal(ckpt.load(ref)["weights"], torch.full((64, 64), 10.0))


def test_missing_data_or_broken_manifest_is_skipped(tmp_path):
    ckpt = Checkpointer(str(tmp_path), keep=5)
    for step in (1, 2, 3):
        _save(ckpt, step)
    (tmp_path / data_name(3)).unlink()
    (tmp_path / manifest_name(2)).write_text("{not json")
    with pytest.warns(CheckpointWarning) as record:
        ref = ckpt.latest_verified()
    assert ref is not None and ref.step == 1
    assert len(record) == 2


def test_nothing_to_resume_from(tmp_path):
    assert Checkpointer(str(tmp_path / "absent")).latest_verified() is None


def test_rng_state_round_trip():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.randn()  # leave a cached gaussian in numpy's state
    state = capture_rng_state()
    expected = (random.random(), np.random.randn(3).tolist(), torch.rand(3).tolist())
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    restore_rng_state(state)
    assert (random.random(), np.random.randn(3).tolist(), torch.rand(3).tolist()) == expected


def test_checkpoint_loads_with_weights_only(tmp_path):
    """RNG states are stored in plain types, so the safe loader accepts the whole file."""
    ckpt = Checkpointer(str(tmp_path))
    _save(ckpt, 1)
    state = torch.load(tmp_path / data_name(1), weights_only=True)
    restore_rng_state(state["rank_states"][0]["rng"])
