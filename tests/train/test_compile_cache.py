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

from ffjobs.train.compile_cache import BLOB

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
    "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
    "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
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
    overrides = ["train.compile=true", "train.steps=2", "train.checkpoint_every=2"]
    first = _compiled_run(tiny_config(tmp_path, *overrides), tmp_path / "local-1")
    blob = tmp_path / "ckpt" / BLOB
    assert first["final_step"] == 2 and blob.stat().st_size > 0
    # a cold cache: the graphs are compiled; one compiled twice within the run (the identity
    # encoder on the sources and on the fused faces) may hit what the run itself just wrote
    assert first["fxgraph_cache_miss"] > first["fxgraph_cache_hit"]

    restart = tiny_config(tmp_path, *overrides, "train.steps=3", "train.resume=false")
    second = _compiled_run(restart, tmp_path / "local-2")
    assert second["final_step"] == 3
    # every graph the first run compiled comes out of the cache it left
    assert second["fxgraph_cache_hit"] >= first["fxgraph_cache_miss"]
    assert second["fxgraph_cache_miss"] == 0
