"""Acceptance on CPU with gloo: DDP equivalence and bitwise-exact resume after SIGKILL.

Both run real ranks (one process each, loopback rendezvous) with the real generator and
discriminator; data are in-memory random pairs.

Equivalence is judged on what DDP owns, in float64 (:func:`helpers.float64_training`): the
averaged gradients of one step, the weights after that step and after three. In float32 the
verdict depended on how a CPU's kernels round each batch shape (Adam normalises tiny gradients,
the identity loss has large cosine gradients); in float64 that rounding stays 10^4 times below
the tolerances, and a summing all-reduce exceeds them 10^5 times over.
"""

from __future__ import annotations

import signal

import pytest
import torch

from ffjobs.local_ranks import LaunchFailed
from ffjobs.train.launch import launch_local

from .helpers import (
    GRAD_RTOL,
    assert_same_final_weights,
    assert_same_first_step,
    assert_same_gradients,
    assert_same_training,
    final_weights,
    float64_training,
    max_relative_diff,
    run_ranks,
    tiny_config,
)

STEPS = 3
# A larger Adam eps keeps rounding noise in gradients that are mathematically zero (conv biases
# right before instance norm) from becoming lr-sized steps. No clipping: it would scale a summed
# gradient back to the averaged one's norm (and it acts on the averaged gradient on every rank).
EQUIVALENCE = ["train.ema_decay=0.5", "train.adam_eps=1e-4", "train.grad_clip=null"]
SHARDED = {
    "2 ranks x b": ["train.batch_size=2"],
    "2 ranks x b/2 x accum 2": ["train.batch_size=1", "train.grad_accum=2"],
}
SUMMING = "2 ranks x b, all-reduce summing instead of averaging"


def _train(tmp_path, name, nproc, *overrides):
    config = tiny_config(tmp_path / name, *overrides)
    result = launch_local(config, nproc, data="memory", quiet_stdout=True)
    return result, final_weights(tmp_path / name / "ckpt")


@pytest.fixture(scope="module")
def one_rank_global_batch(tmp_path_factory):
    """1 rank x batch 4: the reference every sharded run must reproduce; (config, record)."""
    config = tiny_config(tmp_path_factory.mktemp("single"), *EQUIVALENCE, "train.batch_size=4")
    return config, run_ranks(1, float64_training, {"reference": (config, False)}, STEPS)[
        "reference"
    ]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Every 2-rank variant, one after the other in the same two rank processes."""
    tmp = tmp_path_factory.mktemp("ddp")
    runs = {
        name: (tiny_config(tmp / str(i), *EQUIVALENCE, *overrides), False)
        for i, (name, overrides) in enumerate(SHARDED.items())
    }
    runs[SUMMING] = (tiny_config(tmp / "summing", *EQUIVALENCE, *SHARDED["2 ranks x b"]), True)
    return run_ranks(2, float64_training, runs, STEPS)


@pytest.mark.parametrize("sharded", list(SHARDED))
def test_two_ranks_equal_one_rank_with_the_global_batch(one_rank_global_batch, two_ranks, sharded):
    config, reference = one_rank_global_batch
    assert reference["world_size"] == 1 and two_ranks[sharded]["world_size"] == 2
    assert_same_training(two_ranks[sharded], reference, config)


def test_a_summing_all_reduce_fails_the_equivalence(one_rank_global_batch, two_ranks):
    """The comparison above catches a broken gradient average at every stage it checks."""
    config, reference = one_rank_global_batch
    broken = two_ranks[SUMMING]
    for net in ("generator", "discriminator"):
        # the sum over 2 ranks is twice the average (g + 2 (avg - g)): off by the gradient itself,
        # give or take twice the averages' own difference
        diff = max_relative_diff(broken["grads"][net], reference["grads"][net])
        assert diff == pytest.approx(1.0, abs=3 * GRAD_RTOL), net
    with pytest.raises(AssertionError, match="gradients of step 1"):
        assert_same_gradients(broken, reference)
    # Adam is nearly blind to a gradient's scale; it still shows where |g| is near eps
    with pytest.raises(AssertionError, match="after step 1"):
        assert_same_first_step(broken, reference, config)
    with pytest.raises(AssertionError, match="after the last step"):
        assert_same_final_weights(broken, reference)


def test_sigkill_then_restart_is_bitwise_identical_to_a_straight_run(tmp_path):
    common = ["train.steps=6", "train.checkpoint_every=3", "train.keep_checkpoints=5"]
    _, straight = _train(tmp_path, "straight", 2, *common)

    killed = tiny_config(
        tmp_path / "killed", *common, "train.faults.kill_rank=0", "train.faults.kill_at_step=5"
    )
    with pytest.raises(LaunchFailed) as failure:
        launch_local(killed, 2, data="memory", quiet_stdout=True)
    assert failure.value.returncode == -signal.SIGKILL
    assert final_weights(tmp_path / "killed" / "ckpt")["step"] == 3  # step 4 ran and was lost

    restart = tiny_config(tmp_path / "killed", *common)
    result = launch_local(restart, 2, data="memory", quiet_stdout=True)
    resumed = final_weights(tmp_path / "killed" / "ckpt")
    assert result["start_step"] == 3 and result["final_step"] == 6
    for net in ("generator", "discriminator", "ema"):
        for key, value in straight[net].items():
            assert torch.equal(value, resumed[net][key]), f"{net}.{key}"
