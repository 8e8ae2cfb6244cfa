"""One compiled training job in a fresh process, and the cold start that two tests share.

A cold CPU compile of the tiny model is a minute or more of CPU. The planted-files test (what a
job refuses, compiles and signs) and the compile-cache test (a restart warm from what the job
left) both need one from an empty local compiler cache, so the test run makes it once, in its
folder (:func:`cold_compile_of_the_run`).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ffjobs.config import Config
from ffjobs.shared_inputs import make_once
from ffjobs.train.checkpoint.storage import LocalStore
from ffjobs.train.compile import cache as compile_cache

from .helpers import allow_more_time, tiny_config

COMPILED_RUN_S = 600
"""One process training 2 or 3 compiled steps from an empty compiler cache: about a minute on a
quiet 2-core machine, 10 times that for a loaded one."""

COLD_STEPS = ["train.compile=true", "train.steps=2", "train.checkpoint_every=2"]
"""The shared cold start: two compiled steps, a checkpoint (and the compile cache) at step 2."""

_RUN = """
import json, sys
from ffjobs.train.job import TrainJob
from ffjobs.train.worker import run_rank

config = json.loads(sys.argv[1])
job = TrainJob(config=config, data="memory", checkpoint_dir=config["train"]["checkpoint_dir"],
               signing_key_file=sys.argv[2])
print(json.dumps({"final_step": run_rank(job)["final_step"]}))
"""


class PlantedPayload:
    """Unpickled, it creates ``marker``: what an attacker's code would do first."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def planted_pickle(marker: Path) -> bytes:
    return pickle.dumps({"generator": PlantedPayload(marker)})


@dataclass
class CompiledRun:
    final_step: int
    captures: int
    """Region captures of rank 0's first step (from its "first step" line)."""
    loaded: int
    """How many of them came out of the checkpoint folder's saved captures."""
    stderr: str


def compiled_run(config: Config, local_cache: Path, key_file: Path) -> CompiledRun:
    """``config``'s job on one rank in a fresh process whose local compiler cache is
    ``local_cache`` (empty: only the checkpoint folder can make it warm), signing with the key
    in ``key_file`` (made if missing)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "TORCHINDUCTOR_CACHE_DIR": str(local_cache),
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(config.to_dict(), default=str), str(key_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=COMPILED_RUN_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    # rank 0's first-step line: "... 4 compiled regions, 5 captures (5 loaded) ..."
    first_step = next(line for line in lines if line.startswith("first step"))
    captures, loaded = re.search(r"(\d+) captures \((\d+) loaded\)", first_step).groups()
    return CompiledRun(result["final_step"], int(captures), int(loaded), done.stderr)


@dataclass
class ColdRun:
    """:data:`COLD_STEPS` from an empty local compiler cache, with a pickle planted as each
    compile-cache file of the checkpoint folder (marker ``marker`` if it ever ran)."""

    store: LocalStore
    """The job's checkpoint folder, as it left it (tests that write to it copy it first)."""
    key_file: Path
    marker: Path
    run: CompiledRun
    kernels: Path
    """The C++ compiler's output from the job's local compiler cache, alone: the kernels'
    shared libraries and the precompiled header (see :func:`_keep_kernel_binaries`)."""


_RESULT = "result.json"
"""Written last into the cold start's folder: what the job said (the folder is complete)."""


def cold_compile_of_the_run() -> ColdRun:
    """The test run's cold start, in its folder (``FFJOBS_TEST_RUN_DIR`` of tests/conftest.py),
    made by the first process that needs it while the others wait."""
    root = Path(os.environ["FFJOBS_TEST_RUN_DIR"]) / "cold-compile"
    if not (root / _RESULT).exists():  # this test makes it or waits for the process making it
        allow_more_time(COMPILED_RUN_S)
    make_once(
        root,
        _make_cold_compile,
        what="the compiled job's cold start",
        complete=lambda folder: (folder / _RESULT).exists(),
    )
    run = CompiledRun(**json.loads((root / _RESULT).read_text()))
    return ColdRun(
        LocalStore(root / "ckpt"), root / "run" / "signing.key", root / "ran", run, root / "kernels"
    )


def _make_cold_compile(folder: Path) -> None:
    config = tiny_config(folder, *COLD_STEPS)  # checkpoints in folder / "ckpt"
    store = LocalStore(Path(config.train.checkpoint_dir))
    store.write(compile_cache.BLOB, planted_pickle(folder / "ran"))
    store.write(compile_cache.regions_file("cpu"), planted_pickle(folder / "ran"))
    run = compiled_run(config, folder / "local-cache", folder / "run" / "signing.key")
    _keep_kernel_binaries(folder / "local-cache", folder / "kernels")
    shutil.rmtree(folder / "local-cache")  # the restart must find only the checkpoint folder's
    (folder / _RESULT).write_text(json.dumps(asdict(run)))


def _keep_kernel_binaries(local_cache: Path, kernels: Path) -> None:
    """Copy the C++ compiler's output of ``local_cache`` (``*.so``, the precompiled header) to
    ``kernels``, in the same layout and nothing else: no graph, AOT or Dynamo cache entry.

    On CPU, Inductor builds each kernel with ``g++`` unless its shared library is already in
    the local cache, so a restart with an empty cache compiles them all again, most of a cold
    compile's CPU and none of it ffjobs' code. A restart given these finds its kernels built,
    as on a node that built them before, and must still take every capture from the
    checkpoint folder."""
    for path in local_cache.rglob("*"):
        if path.is_file() and path.name.endswith((".so", ".h", ".gch")):
            target = kernels / path.relative_to(local_cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
