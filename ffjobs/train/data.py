"""What the trainer eats: an endless, resumable stream of per-rank micro-batches.

Exact resume needs the position in the data to be part of the checkpoint. The loader's
workers prefetch ahead of what the optimizer has consumed, so the position is counted here,
in consumed batches, not read back from the sampler; on resume the sampler is told where the
epoch stands and the loader is rebuilt from that point.
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
        self.batches_per_epoch = len(self.sampler) // batch_size
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"dataset of {len(dataset)} items gives no full batch of {batch_size} per rank "
                f"on {world_size} ranks; lower train.batch_size or use more data"
            )
        self.epoch = 0
        self.consumed = 0  # batches of the current epoch handed to the trainer
        self._iterator: Iterator[Any] | None = None

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches_consumed": self.consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.consumed = int(state["batches_consumed"])
        self._iterator = None

    def _start_epoch(self) -> Iterator[Any]:
        self.sampler.set_epoch(self.epoch)
        self.sampler.load_state_dict(
            {"epoch": self.epoch, "position": self.consumed * self.batch_size}
        )
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
                (self.seed * 1_000_003 + self.epoch) * 1_009 + self.rank
            ),
        )
        return iter(loader)

    def next(self) -> Any:
        """The next micro-batch; rolls over to the next epoch when this one is exhausted."""
        if self.consumed >= self.batches_per_epoch:
            self.epoch += 1
            self.consumed = 0
            self._iterator = None
        if self._iterator is None:
            self._iterator = self._start_epoch()
        batch = next(self._iterator)
        self.consumed += 1
        return batch
