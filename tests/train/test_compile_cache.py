"""The compile cache lives with the run's checkpoints: a restarted job of the run compiles warm.

Each run is a fresh process with its own empty local compiler cache, so the second one can hit
the cache only through the blob the first one left in the checkpoint store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ffjobs.train.compile_cache import BLOB, precompile_supported

from .helpers import tiny_config

_RUN = """
import json, sys
import torch._dynamo.utils
from ffjobs.train.job import TrainJob
from ffjobs.train.worker import run_rank

config = json.loads(sys.argv[1])
job = TrainJob(config=config, data="memory", checkpoint_dir=config["train"]["checkpoint_dir"])
result = run_rank(job)
counters = torch._dynamo.utils.counters
print(json.dumps({
    "final_step": result["final_step"],
    "losses": [{k: v for k, v in m.items() if k.startswith("loss/")} for m in result["history"]],
    "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
    "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
    "dynamo_cache_hit": counters["dynamo_cache"]["dynamo_cache_hit"],
    "graphs_traced": counters["stats"]["unique_graphs"],
}))
"""


def _compiled_run(config, local_cache) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "TORCHINDUCTOR_CACHE_DIR": str(local_cache),  # empty: only the blob can make it warm
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(config.to_dict(), default=str)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two cold CPU compiles: minutes on two cores
def test_a_restarted_compiled_run_loads_the_cache_from_its_checkpoint_dir(tmp_path):
    overrides = [
        "train.compile=true",
        "train.steps=2",
        "train.checkpoint_every=2",
        "train.log_every=1",
    ]
    first = _compiled_run(tiny_config(tmp_path, *overrides), tmp_path / "local-1")
    blob = tmp_path / "ckpt" / BLOB
    assert first["final_step"] == 2 and blob.stat().st_size > 0
    # a cold cache: the graphs are compiled; one compiled twice within the run (the identity
    # encoder on the sources and on the fused faces) may hit what the run itself just wrote
    assert first["fxgraph_cache_miss"] > first["fxgraph_cache_hit"]

    restart = tiny_config(tmp_path, *overrides, "train.steps=3", "train.resume=false")
    second = _compiled_run(restart, tmp_path / "local-2")
    assert second["final_step"] == 3, second
    # nothing the first run compiled is compiled again: it comes out of the cache it left
    assert second["fxgraph_cache_miss"] == 0, (first, second)
    if precompile_supported():
        # Dynamo's output too (G, D, the identity encoder, the frozen-D pass): no frame is
        # traced again, and the compiled graphs come with Dynamo's entries
        assert first["graphs_traced"] > 0 and first["dynamo_cache_hit"] == 0, first
        assert second["dynamo_cache_hit"] >= 4 and second["graphs_traced"] == 0, second
    else:
        assert second["fxgraph_cache_hit"] >= first["fxgraph_cache_miss"], (first, second)

    # the same seeded weights and data through the same compiled kernels (the restart runs
    # the first run's, loaded from the blob) on as many threads: the losses of steps 1-2 can
    # differ only in the order the threads' partial sums are combined, which moves a float32
    # mean by at most (threads) x 2^-23 relative: below 1e-5 up to 64 threads (step 2 follows
    # one Adam step, whose normalised update carries such a difference on, not amplified)
    for cold, warm in zip(first["losses"], second["losses"][:2], strict=True):
        assert warm == pytest.approx(cold, rel=1e-5, abs=1e-6)


_CACHED_ENTRY = """
import json, sys, warnings
import torch
from torch import nn
from ffjobs.train import compile_cache

compile_cache.use_precompile(world_size=1)
torch.manual_seed(0)
module, x = nn.Linear(4, 4), torch.randn(2, 4)
if sys.argv[1] == "save":
    # compiled frozen while its weights hold a gradient (the trainer's frozen-D pass compiled
    # after D's backward did that): torch pickles the gradients in the entry's guards as a
    # placeholder that does not unpickle again
    module(x).sum().backward()
    module.requires_grad_(False)
    compile_cache.compiled(module, "default")(x)
    open(sys.argv[2], "wb").write(torch.compiler.save_cache_artifacts()[0])
else:
    torch.compiler.load_cache_artifacts(open(sys.argv[2], "rb").read())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile_cache.compiled(module, "default")
    assert torch.equal(compiled(x), module(x))
    print(json.dumps([str(w.message) for w in caught if "not used" in str(w.message)]))
"""


@pytest.mark.skipif(not precompile_supported(), reason="this torch caches no Dynamo entries")
def test_a_cached_entry_that_does_not_install_costs_a_cold_trace_not_the_job(tmp_path):
    blob = tmp_path / "blob.bin"
    for phase, local in (("save", "local-1"), ("load", "local-2")):
        done = subprocess.run(
            [sys.executable, "-c", _CACHED_ENTRY, phase, str(blob)],
            env={
                **os.environ,
                "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / local),
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    warned = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(warned) == 1 and "Linear" in warned[0], warned
