"""The compile cache lives with the run's checkpoints: a restarted job of the run compiles warm.

Each run is a fresh process with its own local compiler cache, so the second one can hit the
cache only through the blob the first one left in the checkpoint store. The second one's local
cache holds only the first one's kernel binaries (the C++ compiler's output, as a node that built
them keeps it), never a graph, AOT or Dynamo entry.
"""

from __future__ import annotations

import os
import shutil

import pytest

from ffjobs.train.compile.cache import BLOB, regions_file
from ffjobs.train.compile.signing import sign

from .compiled_runs import COLD_STEPS, COMPILED_RUN_S, compiled_run
from .helpers import tiny_config

KEY = bytes(range(32))
"""The run's signing key in these tests."""


@pytest.mark.slow  # the shared cold compile (compiled_runs.py), then a warm one: minutes
@pytest.mark.timeout(2 * COMPILED_RUN_S + 60)  # the two runs, the tiny encoder if not made yet
def test_a_restarted_compiled_run_loads_the_cache_from_its_checkpoint_dir(cold_compile, tmp_path):
    first = cold_compile.run  # a cold start that refused the pickles planted as its cache
    assert first.final_step == 2
    assert cold_compile.store.size(BLOB) > 0
    assert cold_compile.store.size(regions_file("cpu")) > 0
    # a cold start: every region captured here (the identity encoder twice: on the sources
    # without grad, on the fused faces with it), none loaded
    assert first.captures >= 4 and first.loaded == 0

    shutil.copytree(cold_compile.store.directory, tmp_path / "ckpt")  # the restart writes to it
    restart = tiny_config(tmp_path, *COLD_STEPS, "train.steps=3", "train.resume=false")
    # the kernels' binaries alone (not g++'s work again): every capture must come from the blob
    local = shutil.copytree(cold_compile.kernels, tmp_path / "local-2")
    second = compiled_run(restart, local, cold_compile.key_file)
    assert second.final_step == 3
    # every capture the first run made comes out of the files it left: nothing traced again
    assert second.loaded == second.captures == first.captures


def test_saved_region_captures_are_used_only_by_the_code_and_settings_they_were_made_for(
    tmp_path,
):
    from ffjobs.train.checkpoint.storage import LocalStore
    from ffjobs.train.compile import cache as compile_cache

    store = LocalStore(tmp_path / "run")
    report = compile_cache.CacheReport()
    compile_cache.save_regions(
        store, report, {"generator": b"captures"}, "code-a", "cuda0", key=KEY
    )
    same = compile_cache.CacheReport()
    compile_cache.load(store, same, fingerprint="code-a", device="cuda0", key=KEY)
    assert same.regions == {"generator": b"captures"}

    other_device = compile_cache.CacheReport()  # guards name their device: not cuda0's
    compile_cache.load(store, other_device, rank=1, fingerprint="code-a", device="cuda1", key=KEY)
    assert other_device.regions == {}

    other_code = compile_cache.CacheReport()
    with pytest.warns(UserWarning, match="captured for other code or settings"):
        compile_cache.load(store, other_code, rank=2, fingerprint="code-b", device="cuda0", key=KEY)
    assert other_code.regions == {}


def _store_with_blob(tmp_path):
    import torch

    from ffjobs.train.checkpoint.storage import LocalStore

    store = LocalStore(tmp_path / "run")
    torch.compile(lambda x: x * 2 + 1)(torch.ones(3))  # one cache entry to carry
    data, _ = torch.compiler.save_cache_artifacts()
    store.write(BLOB, sign(KEY, BLOB, data))
    return store


def test_a_start_that_never_reached_its_first_step_makes_the_next_one_compile_cold(tmp_path):
    from ffjobs.train.compile import cache as compile_cache

    store = _store_with_blob(tmp_path)
    first = compile_cache.CacheReport()
    compile_cache.load(store, first, rank=1, key=KEY)  # loads, then dies before its first step
    assert first.loaded_entries > 0
    assert compile_cache.starting_marker(1) in store.list()

    restart = compile_cache.CacheReport()
    with pytest.warns(UserWarning, match="did not reach its first step"):
        compile_cache.load(store, restart, rank=1, key=KEY)
    assert restart.loaded_entries == 0  # cold: a blob that kills starts cannot kill them all
    assert compile_cache.starting_marker(1) not in store.list()
    assert BLOB in store.list()  # rank 0 replaces it after its first step; nothing else goes

    third = compile_cache.CacheReport()
    compile_cache.load(store, third, rank=1, key=KEY)  # the start after that tries the blob again
    assert third.loaded_entries > 0


def test_the_marker_goes_at_the_first_step_and_other_ranks_have_their_own(tmp_path):
    from ffjobs.train.compile import cache as compile_cache

    store = _store_with_blob(tmp_path)
    rank0, rank1 = compile_cache.CacheReport(), compile_cache.CacheReport()
    compile_cache.load(store, rank0, rank=0, key=KEY)
    compile_cache.load(store, rank1, rank=1, key=KEY)
    compile_cache.first_step_done(store, rank0)
    assert store.list() == sorted([BLOB, compile_cache.starting_marker(1)])

    again = compile_cache.CacheReport()
    compile_cache.load(store, again, rank=0, key=KEY)  # rank 0's last start got through: warm
    assert again.loaded_entries > 0


def test_a_blob_loaded_into_another_local_cache_folder_says_its_kernels_are_tuned_again(
    tmp_path, monkeypatch
):
    import warnings

    import torch

    from ffjobs.train.checkpoint.storage import LocalStore
    from ffjobs.train.compile import cache as compile_cache

    store = LocalStore(tmp_path / "run")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "node-a"))
    torch.compile(lambda x: x * 3 - 1)(torch.ones(3))
    compile_cache.save(store, compile_cache.CacheReport(), key=KEY)
    assert {BLOB, compile_cache.MADE_IN} <= set(store.list())

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same folder: nothing to say
        compile_cache.load(store, compile_cache.CacheReport(), key=KEY)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "node-b"))
    with pytest.warns(UserWarning, match="benchmarked again.*TORCHINDUCTOR_CACHE_DIR"):
        compile_cache.load(store, compile_cache.CacheReport(), rank=1, key=KEY)


def _filesystem(free_bytes: int, flags: int = 0) -> os.statvfs_result:
    """What ``os.statvfs`` says of a file system with ``free_bytes`` free and mount ``flags``."""
    return os.statvfs_result(
        (4096, 4096, 1 << 30, free_bytes // 4096, free_bytes // 4096, 0, 0, 0, flags, 255)
    )


@pytest.mark.parametrize(
    ("free_bytes", "flags", "in_memory"),
    [
        (8 << 30, 0, True),
        (64 << 20, 0, False),  # a container's default /dev/shm: too small for the caches
        (8 << 30, os.ST_NOEXEC, False),  # Triton's launchers could not be loaded from it
        (8 << 30, os.ST_RDONLY, False),
    ],
)
def test_local_caches_go_to_node_memory_only_where_it_can_take_them(
    tmp_path, monkeypatch, free_bytes, flags, in_memory
):
    import tempfile

    from ffjobs.train.compile import cache as compile_cache

    monkeypatch.setattr(compile_cache, "NODE_MEMORY", str(tmp_path))
    monkeypatch.setattr(compile_cache.os, "statvfs", lambda path: _filesystem(free_bytes, flags))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    compile_cache.keep_local_caches_in_memory()
    root = str(tmp_path) if in_memory else tempfile.gettempdir()
    folder = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert os.path.dirname(folder) == root
    assert os.path.basename(folder).startswith("torchinductor_")  # Inductor's own name


def test_without_node_memory_local_caches_stay_where_inductor_puts_them(tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from ffjobs.train.compile import cache as compile_cache

    monkeypatch.setattr(compile_cache, "NODE_MEMORY", str(tmp_path / "absent"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    compile_cache.keep_local_caches_in_memory()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()


def test_a_local_cache_folder_the_job_names_is_kept(tmp_path, monkeypatch):
    from ffjobs.train.compile import cache as compile_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    compile_cache.keep_local_caches_in_memory()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
