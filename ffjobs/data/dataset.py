"""The training dataset: (source, target) face pairs, same identity with a set probability."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

from ffjobs.data.decode import decode_rgb
from ffjobs.data.index import DatasetIndex


def face_transform(image_size: int) -> v2.Compose:
    """Resize the short side, centre-crop square, scale to [-1, 1] (the generator's convention)."""
    return v2.Compose(
        [
            v2.Resize(image_size, antialias=True),
            v2.CenterCrop(image_size),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5]),
        ]
    )


class FacePairDataset(Dataset):
    """Item ``i`` is target image ``i`` paired with a source face.

    With probability ``same_identity_prob`` the source is another image of the target's
    identity (the reconstruction-loss case), otherwise an image of a different identity.
    The choice is a pure function of ``(seed, epoch, i)``, so every rank and every resumed
    run builds the same pairs. Items: ``source``/``target`` float tensors ``3 x S x S`` in
    [-1, 1], ``same_identity`` (bool tensor), ``source_index``/``target_index`` and the
    integer identity labels ``source_identity``/``target_identity``.
    """

    def __init__(self, index: DatasetIndex, image_size: int, same_identity_prob: float, seed: int):
        if len(index) == 0:
            raise ValueError("index: the dataset has no images (all quarantined or empty)")
        self.index = index
        self.image_size = image_size
        self.same_identity_prob = same_identity_prob
        self.seed = seed
        self.epoch = 0
        self.transform = face_transform(image_size)
        self.labels = {name: i for i, name in enumerate(index.identities)}
        members: dict[str, list[int]] = defaultdict(list)
        for i, record in enumerate(index):
            members[record.identity].append(i)
        self.members = dict(members)

    def set_epoch(self, epoch: int) -> None:
        """Draw new pairs for a new epoch (the trainer calls it with the sampler's)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.index)

    def pick_source(self, target: int) -> tuple[int, bool]:
        """``(source index, same identity?)`` for target ``target``, deterministically."""
        rng = random.Random(f"{self.seed}:{self.epoch}:{target}")
        identity = self.index[target].identity
        same = [i for i in self.members[identity] if i != target]
        if same and (rng.random() < self.same_identity_prob or len(self.members) == 1):
            return rng.choice(same), True
        others = [name for name in self.members if name != identity]
        if not others:
            return target, True  # one image of one identity: only self-pairs exist
        return rng.choice(self.members[rng.choice(others)]), False

    def load(self, i: int) -> torch.Tensor:
        return self.transform(decode_rgb(self.index.source.read_bytes(self.index[i].path)))

    def __getitem__(self, target: int) -> dict[str, Any]:
        source, same = self.pick_source(target)
        return {
            "source": self.load(source),
            "target": self.load(target),
            "same_identity": torch.tensor(same),
            "source_index": source,
            "target_index": target,
            "source_identity": self.labels[self.index[source].identity],
            "target_identity": self.labels[self.index[target].identity],
        }
