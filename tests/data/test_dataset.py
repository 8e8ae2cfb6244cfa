"""FacePairDataset: tensors in the model's convention, identity-aware pairs, determinism."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from ffjobs.data.dataset import FacePairDataset
from ffjobs.data.index import build_index
from ffjobs.data.sampler import ResumableDistributedSampler


def test_items_are_normalised_pairs(clean_dataset, tmp_path):
    dataset = FacePairDataset(
        build_index(clean_dataset, cache_dir=tmp_path),
        image_size=48,
        same_identity_prob=0.5,
        seed=0,
    )
    item = dataset[5]
    for key in ("source", "target"):
        assert item[key].shape == (3, 48, 48) and item[key].dtype == torch.float32
        assert item[key].min() >= -1.0 and item[key].max() <= 1.0 and item[key].std() > 0.05
    same = item["source_identity"] == item["target_identity"]
    assert bool(item["same_identity"]) == same
    assert item["source_index"] != item["target_index"]


def test_same_identity_probability_and_determinism(clean_dataset, tmp_path):
    index = build_index(clean_dataset, cache_dir=tmp_path)
    dataset = FacePairDataset(index, 32, same_identity_prob=0.3, seed=1)
    picks = [dataset.pick_source(i) for i in range(len(index))]
    rate = sum(same for _, same in picks) / len(picks)
    assert 0.2 < rate < 0.4
    for target, (source, same) in enumerate(picks):
        assert (index[source].identity == index[target].identity) == same
    assert picks == [
        FacePairDataset(index, 32, 0.3, seed=1).pick_source(i) for i in range(len(index))
    ]
    dataset.set_epoch(1)
    assert [dataset.pick_source(i) for i in range(len(index))] != picks


def test_loader_with_sampler_batches(clean_dataset, tmp_path):
    dataset = FacePairDataset(build_index(clean_dataset, cache_dir=tmp_path), 32, 0.5, seed=0)
    sampler = ResumableDistributedSampler(len(dataset), 2, 0, seed=0)
    batch = next(iter(DataLoader(dataset, batch_size=4, sampler=sampler)))
    assert batch["source"].shape == (4, 3, 32, 32) and batch["same_identity"].dtype == torch.bool
