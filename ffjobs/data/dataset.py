"""The training dataset: (source, target) face pairs, same identity with a set probability.

Images leave the dataset as ``uint8`` (4x fewer bytes through the loader's shared memory,
pinning and host-to-device copy than float32); :func:`to_model_images` turns a batch of them
into the model's float ``[-1, 1]`` convention on the device.
"""

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
    """Resize the short side and centre-crop square; always ``uint8`` out."""
    return v2.Compose(
        [
            v2.ToDtype(torch.uint8, scale=True),  # 16-bit PNGs decode to uint16
            v2.Resize(image_size, antialias=True),
            v2.CenterCrop(image_size),
        ]
    )


def to_model_images(
    images: torch.Tensor,
    device: torch.device | str | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """``uint8`` images (``... x 3 x H x W``, 0..255) as float32 in [-1, 1] on ``device``.

    ``(x - 127.5) / 127.5``: the subtraction is exact in float32, so each value is the correctly
    rounded ``(2x - 255) / 255`` (0 -> -1, 255 -> 1 exactly). The uint8 tensor crosses to the
    device first (a quarter of the bytes), the conversion runs there.
    """
    if images.dtype != torch.uint8:
        raise TypeError(f"images: expected uint8 (the dataset's contract), got {images.dtype}")
    if device is not None:
        images = images.to(device, non_blocking=True)
    return images.to(torch.float32, memory_format=memory_format).sub_(127.5).div_(127.5)


class FacePairDataset(Dataset):
    """Item ``i`` is target image ``i`` paired with a source face.

    With probability ``same_identity_prob`` the source is another image of the target's
    identity (the reconstruction-loss case), otherwise an image of a different identity.
    The choice is a pure function of ``(seed, epoch, i)``, so every rank and every resumed
    run builds the same pairs. Items: ``source``/``target`` ``uint8`` tensors ``3 x S x S``
    (RGB, 0..255; :func:`to_model_images` makes them the model's input), ``same_identity``
    (bool tensor), ``source_index``/``target_index`` and the integer identity labels
    ``source_identity``/``target_identity``.
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
        """Image ``i`` as ``uint8`` ``3 x S x S``."""
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
