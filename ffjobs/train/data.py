"""What the trainer eats: an endless, resumable stream of per-rank micro-batches.

Exact resume needs the position in the data to be part of the checkpoint. The loader's
workers prefetch ahead of what the optimizer has consumed, so the sampler is advanced here, one
consumed batch at a time, and its state (epoch, position) is what gets checkpointed; on resume
the loader is rebuilt from that position.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset


class RandomPairs(Dataset):
    """In-memory random pairs of one fixed size: measures training without image decoding."""

    def __init__(self, length: int, size: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.rand(length, 3, size, size, generator=generator) * 2 - 1
        self.same = torch.rand(length, generator=generator) < 0.5

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        partner = index if self.same[index] else (index + 1) % len(self.images)
        return {
            "source": self.images[partner],
            "target": self.images[index],
            "same_identity": self.same[index],
        }


class BatchStream:
    """Per-rank micro-batches across epochs, with a checkpointable position."""

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        num_workers: int = 0,
        pin_memory: bool = False,
    ):
        from ffjobs.data.sampler import ResumableDistributedSampler

        self.dataset = dataset
        self.batch_size = batch_size
        self.rank, self.seed = rank, seed
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.sampler = ResumableDistributedSampler(
            len(dataset),
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=seed,
            drop_last=True,
        )
        self.batches_per_epoch = self.sampler.num_samples // batch_size
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"dataset of {len(dataset)} items gives no full batch of {batch_size} per rank "
                f"on {world_size} ranks; lower train.batch_size or use more data"
            )
        self._iterator: Iterator[Any] | None = None

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def state_dict(self) -> dict[str, Any]:
        """The sampler's epoch and consumed position (it is advanced per consumed batch)."""
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
        self._iterator = None

    def _start_epoch(self) -> Iterator[Any]:
        if hasattr(self.dataset, "set_epoch"):  # new (source, target) pairs every epoch
            self.dataset.set_epoch(self.sampler.epoch)
        loader = DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            sampler=self.sampler,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            drop_last=True,
            persistent_workers=False,
            # the loader draws its worker seed from this generator, not from the global RNG,
            # so rebuilding it mid-epoch on resume leaves the training RNG stream untouched
            generator=torch.Generator().manual_seed(
                (self.seed * 1_000_003 + self.sampler.epoch) * 1_009 + self.rank
            ),
        )
        return iter(loader)

    def next(self) -> Any:
        """The next micro-batch; rolls over to the next epoch when this one is exhausted."""
        if self.sampler.position + self.batch_size > self.sampler.num_samples:
            self.sampler.set_epoch(self.sampler.epoch + 1)
            self._iterator = None
        if self._iterator is None:
            self._iterator = self._start_epoch()
        batch = next(self._iterator)
        self.sampler.advance(self.batch_size)
        return batch
