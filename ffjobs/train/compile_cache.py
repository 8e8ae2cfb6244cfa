"""torch.compile's caches kept in the run's checkpoint store, so a restarted job compiles warm.

After the first compiled step, rank 0 takes the compiler's cache entries of this process
(``torch.compiler.save_cache_artifacts``: Inductor's compiled graphs and kernels, AOTAutograd's
forward/backward graphs, autotuning results) and writes them as one blob beside the
checkpoints, so it works for a shared directory and for ``s3://`` alike. A later job of the
same run loads the blob on every rank before its first step (``load_cache_artifacts`` fills the
local caches), and compiling becomes cache lookups. A blob that does not load (another torch,
another GPU) is ignored with a warning: the job then compiles cold, as without it.

The blob also carries Inductor's autotuning results (the ``*.best_config`` files beside the
compiled kernels in the local cache): without them every kernel with several candidate
launch configurations was benchmarked again at the first step of a warm job (8 s on one H200,
``docs/benchmarks.md``). They go back to the same relative paths, where the kernels loaded
from the artifacts look for them.
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

from ffjobs.train.storage import CheckpointStore

BLOB = "compile-cache.bin"


@dataclass
class CacheReport:
    """What one process did with the blob."""

    loaded_entries: int = 0
    loaded_bytes: int = 0
    saved_entries: int = 0
    saved_bytes: int = 0
    autotune_entries: int = 0
    """Autotuning results loaded (or saved) with the artifacts."""


def _entries(info: object) -> int:
    return sum(len(keys) for keys in getattr(info, "artifacts", {}).values())


def _local_cache_root() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def _autotune_results(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*.best_config")}


def _restore_autotune_results(root: Path, results: dict[str, bytes]) -> None:
    for relative, data in results.items():
        target = (root / relative).resolve()
        if root.resolve() not in target.parents:  # only ever below the local cache
            raise ValueError(f"autotune entry outside the cache folder: {relative}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def load(store: CheckpointStore, report: CacheReport) -> None:
    """Fill this process's compiler caches from the store's blob, if it has one."""
    import torch

    if BLOB not in store.list():
        return
    try:
        data = store.read(BLOB)
        blob = pickle.loads(data)  # written by save() below into the run's own store
        info = torch.compiler.load_cache_artifacts(blob["artifacts"])
        _restore_autotune_results(_local_cache_root(), blob["autotune"])
    except Exception as exc:  # a stale or foreign cache costs a cold compile, never the job
        warnings.warn(f"compile cache {store.describe(BLOB)} not loaded: {exc}", stacklevel=2)
        return
    report.loaded_bytes = len(data)
    report.loaded_entries = _entries(info)
    report.autotune_entries = len(blob["autotune"])


def save(store: CheckpointStore, report: CacheReport) -> None:
    """Write this process's compiler cache entries as the store's blob (rank 0, once).

    Skipped when the blob was loaded at start: the entries are the ones it already holds.
    """
    import torch

    if report.loaded_entries:
        return
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is None:
        return
    data, info = artifacts
    autotune = _autotune_results(_local_cache_root())
    blob = pickle.dumps({"artifacts": data, "autotune": autotune})
    store.write(BLOB, blob)
    report.saved_bytes = len(blob)
    report.saved_entries = _entries(info)
    report.autotune_entries = len(autotune)
