"""``train.compile_mode: reduce-overhead`` (CUDA graph replay) trains as the plain compiled step.

Replaying a step as CUDA graphs can go wrong in ways that change values, not just speed: a
graph that reads the last step's inputs from its static buffers, or an output overwritten by
the next replay before it was used. On CPU the mode compiles as ``default`` (no graphs to
take), so the comparison needs a CUDA device.
"""

from __future__ import annotations

import pytest
import torch

from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import DistEnv

from .helpers import TINY_MODEL, rank_micro_batches

STEPS = 4
ENV = DistEnv(rank=0, world_size=1, local_rank=0, master_addr="", master_port=0, source="single")


def _train(tmp_path, mode: str) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    from ffjobs.config import load_config
    from ffjobs.train.trainer import Trainer

    config = load_config(
        "local",
        [
            *TINY_MODEL,
            "model.identity_weights=null",
            "train.batch_size=4",
            "train.precision=fp32",
            "train.deterministic=true",
            "train.compile=true",
            f"train.compile_mode={mode}",
            "train.compile_cache=false",
            f"train.checkpoint_dir={tmp_path / mode}",
            "tracking.enabled=false",
        ],
    )
    device = torch.device("cuda", 0)
    dataset = RandomPairs(64, config.model.resolution, seed=0)
    trainer = Trainer(config, ENV, device, dataset)
    losses, tc = [], config.train
    for step in range(STEPS):
        batches = rank_micro_batches(dataset, step, ENV, tc.batch_size, tc.grad_accum)
        losses.append({k: float(v) for k, v in trainer.train_step(batches).items()})
    weights = {k: v.detach().clone() for k, v in trainer.g_module.state_dict().items()}
    return losses, weights


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graph_replay_trains_like_the_compiled_step(tmp_path):
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    torch._dynamo.reset()
    counters.clear()
    replayed = _train(tmp_path, "reduce-overhead")
    assert counters["inductor"]["cudagraph_skips"] == 0  # every compiled region became graphs
    assert cudagraph_trees.get_container(0).tree_manager is not None
    torch._dynamo.reset()
    compiled = _train(tmp_path, "default")
    # Both run the same generated kernels in the same order on the same batches (deterministic
    # algorithms): only float32 rounding may differ, 4 steps of it (well under 1e-4 relative).
    # A stale input or an overwritten output differs by the values themselves (order 1).
    for step, (ours, theirs) in enumerate(zip(replayed[0], compiled[0], strict=True), 1):
        for name, value in theirs.items():
            assert ours[name] == pytest.approx(value, rel=1e-4, abs=1e-6), (step, name)
    for key, value in compiled[1].items():
        torch.testing.assert_close(replayed[1][key], value, rtol=1e-4, atol=1e-6, msg=key)
