"""FacePairDataset: uint8 images, the model's [-1, 1] convention, identity-aware pairs,
determinism."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from ffjobs.data.dataset import FacePairDataset, to_model_images
from ffjobs.data.index import build_index
from ffjobs.data.sampler import ResumableDistributedSampler


def test_items_are_uint8_pairs(clean_dataset, tmp_path):
    dataset = FacePairDataset(
        build_index(clean_dataset, cache_dir=tmp_path),
        image_size=48,
        same_identity_prob=0.5,
        seed=0,
    )
    item = dataset[5]
    for key in ("source", "target"):
        assert item[key].shape == (3, 48, 48) and item[key].dtype == torch.uint8
        assert item[key].float().std() > 0.05 * 255
        model_input = to_model_images(item[key])
        assert model_input.dtype == torch.float32
        assert model_input.min() >= -1.0 and model_input.max() <= 1.0
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


def test_to_model_images_is_exact_at_0_255_and_128():
    images = torch.tensor([0, 255, 128], dtype=torch.uint8).view(1, 3, 1, 1).expand(2, 3, 4, 4)
    out = to_model_images(images)
    assert out.dtype == torch.float32 and out.shape == (2, 3, 4, 4)
    assert (out[:, 0] == -1.0).all() and (out[:, 1] == 1.0).all()
    assert (out[:, 2] == torch.tensor(1 / 255, dtype=torch.float32)).all()
    # every value is the float32 nearest to (2x - 255) / 255
    exact = (torch.arange(256, dtype=torch.float64) * 2 - 255) / 255
    assert torch.equal(to_model_images(torch.arange(256, dtype=torch.uint8)), exact.float())


def test_to_model_images_keeps_the_memory_format_and_rejects_floats():
    images = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    out = to_model_images(images, "cpu", torch.channels_last)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, to_model_images(images))
    with pytest.raises(TypeError, match="uint8"):
        to_model_images(images.float())
