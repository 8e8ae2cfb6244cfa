"""BatchStream with persistent workers and DevicePrefetcher: order, per-epoch pairs, exact
resume from the consumed position (not the prefetched one)."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from torch.utils.data import Dataset

from ffjobs.train.data import BatchStream, RandomPairs
from ffjobs.train.prefetch import DevicePrefetcher
from ffjobs.train.stop import STOP_SIGNALS


class EpochEcho(Dataset):
    """Items say which index, which epoch and which process served them."""

    def __init__(self, length: int):
        self.length = length
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return {
            "image": torch.full((3, 2, 2), index, dtype=torch.uint8),
            "index": index,
            "epoch": self.epoch,
            "pid": os.getpid(),
        }


def _stream(num_workers: int = 0, length: int = 16) -> BatchStream:
    return BatchStream(EpochEcho(length), 4, rank=0, world_size=1, seed=3, num_workers=num_workers)


def test_workers_outlive_the_stop_signals_slurm_sends_every_process_of_a_step():
    # scancel and SLURM's --signal reach the loader's workers too; the rank is to checkpoint
    # and stop, so its next batches must still come (a dead worker raises in the rank)
    rank_handler = signal.getsignal(signal.SIGTERM)
    stream, straight = _stream(num_workers=2, length=32), _stream(num_workers=0, length=32)
    first = [stream.next() for _ in range(2)]  # one from each worker (round robin): each has
    # run its init, which a signal must not beat (until then a worker has the rank's handlers)
    assert len({batch["pid"][0].item() for batch in first}) == 2
    workers = stream._iterator._workers  # the loader's worker processes
    for worker in workers:
        for sig in STOP_SIGNALS:
            os.kill(worker.pid, sig)
    batches = first + [stream.next() for _ in range(10)]  # into the next epochs, too
    assert _indices(batches) == _indices([straight.next() for _ in range(12)])
    assert all(worker.is_alive() for worker in workers)
    assert signal.getsignal(signal.SIGTERM) == rank_handler  # the rank's own are untouched


def _indices(batches: list[dict]) -> list[list[int]]:
    return [batch["index"].tolist() for batch in batches]


def test_persistent_workers_serve_every_epoch_with_that_epochs_items():
    stream = _stream(num_workers=2)
    batches = [stream.next() for _ in range(12)]  # 3 epochs of 4 batches
    for number, batch in enumerate(batches):
        assert batch["epoch"].tolist() == [number // 4] * 4
    for epoch in range(3):
        order = sum(_indices(batches[4 * epoch : 4 * epoch + 4]), [])
        stream.sampler.epoch = epoch  # the sampler's own order for that epoch
        assert order == stream.sampler.epoch_indices()
    pids = [set(b["pid"].tolist()) for b in batches]
    assert pids[0] | pids[1] == pids[-1] | pids[-2] and os.getpid() not in pids[0]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_prefetcher_checkpoints_the_consumed_position(num_workers):
    straight = DevicePrefetcher(_stream(num_workers), torch.device("cpu"), depth=2)
    first = [straight.next() for _ in range(6)]  # into the second epoch, 2 batches in flight
    state = straight.state_dict()
    assert state["epoch"] == 1 and state["position"] == 8
    rest = [straight.next() for _ in range(6)]

    resumed = DevicePrefetcher(_stream(num_workers), torch.device("cpu"), depth=2)
    resumed.load_state_dict(state)
    assert _indices([resumed.next() for _ in range(6)]) == _indices(rest)
    assert _indices(first) != _indices(rest)


def test_prefetcher_on_cpu_passes_batches_through_in_order():
    plain = BatchStream(RandomPairs(32, 8, seed=1), 4, rank=0, world_size=1, seed=0)
    wrapped = DevicePrefetcher(
        BatchStream(RandomPairs(32, 8, seed=1), 4, rank=0, world_size=1, seed=0),
        torch.device("cpu"),
    )
    for _ in range(10):  # more than one epoch (8 batches)
        expected, got = plain.next(), wrapped.next()
        assert got["source"].dtype == torch.uint8 and got["source"].device.type == "cpu"
        for key in ("source", "target", "same_identity"):
            assert torch.equal(got[key], expected[key])
        assert wrapped.state_dict() == plain.state_dict()


def test_set_epoch_rewinds_what_was_in_flight():
    prefetcher = DevicePrefetcher(_stream(), torch.device("cpu"), depth=2)
    prefetcher.next()
    prefetcher.set_epoch(2)
    assert prefetcher.state_dict()["epoch"] == 2 and prefetcher.state_dict()["position"] == 0
    assert prefetcher.next()["epoch"].tolist() == [2] * 4


def test_random_pairs_show_a_pool_of_distinct_images_over_a_long_epoch():
    pairs = RandomPairs(100, 8, seed=3, distinct=10)
    assert len(pairs) == 100 and len(pairs.images) == 10
    assert torch.equal(pairs[7]["target"], pairs[17]["target"])
    assert not torch.equal(pairs[7]["target"], pairs[8]["target"])
    assert pairs[7]["target"].dtype == torch.uint8


def test_memory_data_epochs_last_many_steps():
    from ffjobs.config import load_config
    from ffjobs.train.worker import MEMORY_EPOCH_STEPS, build_train_dataset

    config = load_config("local", ["train.batch_size=4"])
    dataset = build_train_dataset(config, "memory", world_size=2)
    # a new epoch restarts the loader workers' prefetch: it must be rare
    assert len(dataset) == MEMORY_EPOCH_STEPS * 4 * 2 >= 1000 * 8
