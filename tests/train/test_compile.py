"""torch.compile (the GPU preset's default) trains the same model as eager, under DDP.

Compared on two ranks in float64 (:func:`helpers.float64_training`), where the kernels' other
summation order is far below the tolerances: the averaged gradients, the first step and the
weights after three steps. A compiled DDP whose all-reduce sums instead of averaging must fail
the same comparison.
"""

from __future__ import annotations

import pytest

from .helpers import (
    GRAD_RTOL,
    assert_same_gradients,
    assert_same_training,
    float64_training,
    max_relative_diff,
    run_ranks,
    tiny_config,
)

# three compiled or eager float64 trainings on two ranks, compiled cold: about a minute on a
# quiet 2-core machine
pytestmark = pytest.mark.slow

# as in test_ddp_acceptance: no clipping (it would hide a mis-scaled average), Adam eps 1e-4
SHORT = ["train.ema_decay=0.5", "train.adam_eps=1e-4", "train.grad_clip=null", "train.batch_size=2"]


@pytest.fixture(scope="module")
def eager_and_compiled(tmp_path_factory):
    """(eager config, records of ``eager``, ``compiled`` and ``compiled, summing``)."""
    tmp = tmp_path_factory.mktemp("compile")
    eager = tiny_config(tmp / "eager", *SHORT)
    compiled = tiny_config(tmp / "compiled", *SHORT, "train.compile=true")
    runs = {
        "eager": (eager, False),
        "compiled": (compiled, False),
        "compiled, summing": (compiled, True),
    }
    return eager, run_ranks(2, float64_training, runs, 3)


def test_compiled_ddp_training_matches_eager_and_saves_plain_weights(eager_and_compiled):
    config, records = eager_and_compiled
    eager, compiled = records["eager"], records["compiled"]
    assert compiled["world_size"] == eager["world_size"] == 2
    for net, weights in compiled["final"].items():
        assert weights.keys() == eager["final"][net].keys(), net
        assert not [k for k in weights if k.startswith(("_orig_mod.", "module."))], net
    assert_same_training(compiled, eager, config)


def test_compiled_ddp_with_a_summing_all_reduce_fails_the_comparison(eager_and_compiled):
    _, records = eager_and_compiled
    broken, eager = records["compiled, summing"], records["eager"]
    diff = max_relative_diff(broken["grads"]["generator"], eager["grads"]["generator"])
    # twice the average: off by the gradient itself, give or take twice the averages' difference
    assert diff == pytest.approx(1.0, abs=3 * GRAD_RTOL)
    with pytest.raises(AssertionError, match="gradients of step 1"):
        assert_same_gradients(broken, eager)
