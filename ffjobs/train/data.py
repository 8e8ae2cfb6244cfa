"""What the trainer eats: an endless, resumable stream of per-rank micro-batches.

Exact resume needs the position in the data to be part of the checkpoint. The loader's
workers prefetch ahead of what the optimizer has consumed, so the sampler is advanced here, one
consumed batch at a time, and its state (epoch, position) is what gets checkpointed; on resume
the loader restarts from that position.

The loader is built once and keeps its worker processes across epochs (``persistent_workers``):
restarting a rank's workers every epoch stalled training for seconds. Persistent workers hold
their own copy of the dataset, so the epoch cannot be set on the main process's copy; instead
every sampled index travels as ``(epoch, index)`` and the worker sets the epoch on its copy
before loading the item (:class:`EpochTaggedSampler`, :class:`EpochTaggedDataset`).

A stop signal is the rank's, not its workers': SLURM signals every process of a job step
(``scancel``, the time-limit and pre-emption warnings), and so does ``timeout`` to its process
group. A worker that died of it would make the rank's next batch, or the loader's SIGCHLD
handler in the middle of the stop checkpoint, raise. Workers ignore the stop signals
(:func:`start_worker`) and end when the rank shuts the loader down or dies (the kernel's
parent-death signal, :mod:`ffjobs.process_tree`); SIGKILL still ends them. Until its init runs,
a forked worker has the handlers its rank installed before the loader started (they only set a
flag).
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ffjobs.data.sampler import ResumableDistributedSampler
from ffjobs.process_tree import die_with_parent
from ffjobs.train.stop import STOP_SIGNALS


def start_worker(rank_pid: int, _worker_id: int) -> None:
    """A loader worker's start: it ends with its rank (``rank_pid``), and the stop signals are
    left to the rank (module docstring)."""
    die_with_parent(rank_pid)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class RandomPairs(Dataset):
    """In-memory random ``uint8`` pairs of one fixed size: training without image decoding.

    Same item contract as :class:`ffjobs.data.dataset.FacePairDataset` (``uint8`` images).
    ``distinct``: how many different images back the ``length`` items (item ``i`` shows image
    ``i % distinct``), so an epoch can be long without holding ``length`` images in memory.
    """

    def __init__(self, length: int, size: int, seed: int = 0, distinct: int | None = None):
        generator = torch.Generator().manual_seed(seed)
        pool = length if distinct is None else min(length, distinct)
        self.length = length
        self.images = torch.randint(
            0, 256, (pool, 3, size, size), dtype=torch.uint8, generator=generator
        )
        self.same = torch.rand(length, generator=generator) < 0.5

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        partner = index if self.same[index] else (index + 1) % self.length
        pool = len(self.images)
        return {
            "source": self.images[partner % pool],
            "target": self.images[index % pool],
            "same_identity": self.same[index],
        }


class EpochTaggedSampler(Sampler[tuple[int, int]]):
    """Yields ``(epoch, index)`` for each index of ``sampler``, the epoch read when iteration
    starts (the sampler itself is unchanged: same order, same resumable position)."""

    def __init__(self, sampler: ResumableDistributedSampler):
        self.sampler = sampler

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.sampler.epoch
        return ((epoch, index) for index in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


class EpochTaggedDataset(Dataset):
    """``dataset[(epoch, i)]`` is ``dataset[i]`` after ``dataset.set_epoch(epoch)`` (if it has
    one): correct in a persistent worker whatever epoch its copy last served."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self._epoch: int | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        if epoch != self._epoch and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)  # new (source, target) pairs every epoch
        self._epoch = epoch
        return self.dataset[index]


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
        prefetch_factor: int = 2,
    ):
        self.dataset = dataset
        self.batch_size = batch_size
        self.rank, self.seed = rank, seed
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.prefetch_factor = prefetch_factor
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
        self._loader: DataLoader | None = None
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

    def set_epoch(self, epoch: int) -> None:
        """Continue at the start of ``epoch`` (resuming on another world size)."""
        if epoch != self.sampler.epoch:
            self.sampler.set_epoch(epoch)
            self._iterator = None

    def _build_loader(self) -> DataLoader:
        workers = self.num_workers > 0
        return DataLoader(
            EpochTaggedDataset(self.dataset),
            batch_size=self.batch_size,
            sampler=EpochTaggedSampler(self.sampler),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            drop_last=True,
            persistent_workers=workers,
            prefetch_factor=self.prefetch_factor if workers else None,
            worker_init_fn=functools.partial(start_worker, os.getpid()),
            # the loader draws its worker seed from this generator, not from the global RNG,
            # so (re)starting it on resume leaves the training RNG stream untouched
            generator=torch.Generator().manual_seed(self.seed * 1_009 + self.rank),
        )

    def _start_epoch(self) -> Iterator[Any]:
        """Iterate from the sampler's position; persistent workers are reused, and a restart
        mid-iteration drops what they had prefetched (``DataLoader`` drains it)."""
        if self._loader is None:
            self._loader = self._build_loader()
        return iter(self._loader)

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
