"""Sampler: disjoint shards, full coverage per epoch, reshuffle per epoch, exact mid-epoch resume."""

from __future__ import annotations

import pytest
from torch.utils.data import DistributedSampler

from ffjobs.data.sampler import ResumableDistributedSampler

N = 50


def test_two_ranks_three_epochs_cover_disjoint_and_reshuffle():
    samplers = [ResumableDistributedSampler(N, 2, rank, seed=7) for rank in range(2)]
    orders = []
    for epoch in range(3):
        shards = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        assert not set(shards[0]) & set(shards[1])
        covered = shards[0] + shards[1]
        assert len(covered) == len(set(covered)) == N  # 50 % 2 == 0: nothing dropped
        orders.append(shards[0])
    assert orders[0] != orders[1] != orders[2]


def test_same_order_as_torch_distributed_sampler():
    for drop_last in (True, False):
        ours = ResumableDistributedSampler(N + 1, 2, 1, seed=3, drop_last=drop_last)
        theirs = DistributedSampler(
            range(N + 1), num_replicas=2, rank=1, seed=3, drop_last=drop_last
        )
        for epoch in (0, 1):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)
            assert len(ours) == len(theirs)


@pytest.mark.parametrize("stop_at", [0, 1, 13, 24])
def test_resume_from_position_reproduces_uninterrupted_order(stop_at):
    uninterrupted = ResumableDistributedSampler(N, 2, 0, seed=1)
    uninterrupted.set_epoch(2)
    expected = list(uninterrupted)

    interrupted = ResumableDistributedSampler(N, 2, 0, seed=1)
    interrupted.set_epoch(2)
    seen = list(interrupted)[:stop_at]
    interrupted.advance(stop_at)
    state = interrupted.state_dict()

    resumed = ResumableDistributedSampler(N, 2, 0, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the trainer calls it again on resume; it must keep the position
    assert len(resumed) == len(expected) - stop_at
    assert seen + list(resumed) == expected
    resumed.set_epoch(3)
    assert len(list(resumed)) == len(expected)


def test_resume_with_another_world_size_is_refused():
    state = ResumableDistributedSampler(N, 2, 0).state_dict()
    with pytest.raises(ValueError, match="same world size"):
        ResumableDistributedSampler(N, 4, 0).load_state_dict(state)
