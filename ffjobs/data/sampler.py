"""A ``DistributedSampler`` that can resume mid-epoch from a saved position."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler


class ResumableDistributedSampler(Sampler[int]):
    """Same order as ``torch.utils.data.DistributedSampler`` (seeded ``randperm`` per epoch,
    rank ``r`` takes every ``num_replicas``-th index), plus a resumable position.

    ``position`` counts the samples this rank has *consumed* in the current epoch. The
    sampler cannot count that itself (a DataLoader prefetches ahead of training), so the
    trainer calls :meth:`advance` with each consumed batch size and checkpoints
    :meth:`state_dict`; after :meth:`load_state_dict`, iteration restarts exactly there.
    """

    def __init__(
        self,
        dataset_len: int,
        num_replicas: int,
        rank: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
    ):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank: must be in [0, {num_replicas}), got {rank}")
        self.dataset_len = dataset_len
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.position = 0
        if drop_last and dataset_len % num_replicas:
            self.num_samples = math.ceil((dataset_len - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(dataset_len / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def epoch_indices(self) -> list[int]:
        """This rank's whole shard for the current epoch (ignoring the position)."""
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(self.dataset_len, generator=generator).tolist()
        else:
            indices = list(range(self.dataset_len))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[: self.total_size]
        return indices[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_indices()[self.position :])

    def __len__(self) -> int:
        return self.num_samples - self.position

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``; a different epoch restarts at position 0, the same one keeps it
        (so calling it again after :meth:`load_state_dict` does not lose the resume point)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.position = 0

    def advance(self, consumed: int) -> None:
        """Record that this rank consumed ``consumed`` more samples of the current epoch."""
        self.position = min(self.position + consumed, self.num_samples)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_replicas": self.num_replicas,
            "dataset_len": self.dataset_len,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (
            state.get("num_replicas", self.num_replicas) != self.num_replicas
            or state.get("dataset_len", self.dataset_len) != self.dataset_len
        ):
            raise ValueError(
                f"sampler state is for {state.get('num_replicas')} ranks x "
                f"{state.get('dataset_len')} samples, this run has {self.num_replicas} x "
                f"{self.dataset_len}; resume with the same world size and dataset"
            )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
