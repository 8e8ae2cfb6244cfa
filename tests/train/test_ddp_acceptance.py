"""Acceptance on CPU with gloo: DDP equivalence and bitwise-exact resume after SIGKILL.

Both run real ranks (one process each, loopback rendezvous) with the real generator and
discriminator; data are in-memory random pairs so the data path (sampler, loader, resume
position) is exercised without image decoding.
"""

from __future__ import annotations

import signal

import pytest
import torch

from ffjobs.train.launch import LaunchFailed, launch_local

from .helpers import final_weights, tiny_config

# Adam turns rounding noise in gradients that are mathematically zero (conv biases right
# before instance norm) into lr-sized steps; a larger eps compares what DDP owns: gradients.
EQUIVALENCE = [
    "train.steps=3",
    "train.checkpoint_every=3",
    "train.ema_decay=0.5",
    "train.adam_eps=1e-4",
]


def _train(tmp_path, name, nproc, *overrides):
    config = tiny_config(tmp_path / name, *overrides)
    result = launch_local(config, nproc, data="memory", quiet_stdout=True)
    return result, final_weights(tmp_path / name / "ckpt")


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def one_rank_global_batch(tmp_path_factory):
    """1 rank x batch 4: the reference every sharded run must reproduce."""
    return _train(tmp_path_factory.mktemp("single"), "run", 1, *EQUIVALENCE, "train.batch_size=4")[
        1
    ]


@pytest.mark.parametrize(
    "sharded",
    [
        pytest.param(["train.batch_size=2", "train.grad_accum=1"], id="2 ranks x b"),
        pytest.param(["train.batch_size=1", "train.grad_accum=2"], id="2 ranks x b/2 x accum 2"),
    ],
)
def test_two_ranks_equal_one_rank_with_the_global_batch(tmp_path, one_rank_global_batch, sharded):
    result, ddp = _train(tmp_path, "ddp", 2, *EQUIVALENCE, *sharded)
    assert result["world_size"] == 2 and result["backend"] == "gloo"
    assert one_rank_global_batch["step"] == ddp["step"] == 3
    for net in ("generator", "discriminator", "ema"):
        assert _max_abs_diff(one_rank_global_batch[net], ddp[net]) < 1e-5, net


def test_equivalence_is_not_trivial(tmp_path, one_rank_global_batch):
    """Another data seed gives clearly different weights, so the tolerance above is tight."""
    _, other = _train(tmp_path, "other", 1, *EQUIVALENCE, "train.batch_size=4", "train.seed=1")
    assert _max_abs_diff(one_rank_global_batch["generator"], other["generator"]) > 1e-3


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
