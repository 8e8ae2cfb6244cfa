"""torch.compile's caches kept in the run's checkpoint store, so a restarted job compiles warm.

After the first compiled step, rank 0 takes the compiler's cache entries of this process
(``torch.compiler.save_cache_artifacts``: Inductor's compiled graphs and kernels, AOTAutograd's
forward/backward graphs, autotuning results) and writes them as one blob beside the
checkpoints, so it works for a shared directory and for ``s3://`` alike. A later job of the
same run loads the blob on every rank before its first step (``load_cache_artifacts`` fills the
local caches), and compiling becomes cache lookups. A blob that does not load (another torch,
another GPU) is ignored with a warning: the job then compiles cold, as without it.

A blob that loads but whose job then dies before its first step must not take every restart
down the same way: each rank leaves a marker (``compile-cache.rank<N>.starting``) before it
loads the blob and removes it once its first step is done. A rank that finds its own marker
from an earlier start compiles cold instead, with a warning, and rank 0 then writes a new
blob. A job killed during start-up for another reason costs its restart one cold compile.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from ffjobs.train.storage import CheckpointStore

BLOB = "compile-cache.bin"


@dataclass
class CacheReport:
    """What one process did with the blob."""

    loaded_entries: int = 0
    loaded_bytes: int = 0
    saved_entries: int = 0
    saved_bytes: int = 0
    marker: str | None = None
    """The start-up marker this rank left in the store (until its first step)."""


def _entries(info: object) -> int:
    return sum(len(keys) for keys in getattr(info, "artifacts", {}).values())


def starting_marker(rank: int) -> str:
    """The marker rank ``rank`` keeps in the store from loading the blob to its first step."""
    return f"compile-cache.rank{rank}.starting"


def load(store: CheckpointStore, report: CacheReport, rank: int = 0) -> None:
    """Fill this process's compiler caches from the store's blob, if it has one."""
    import torch

    names = store.list()
    if BLOB not in names:
        return
    marker = starting_marker(rank)
    if marker in names:
        store.delete(marker)
        warnings.warn(
            f"compile cache {store.describe(BLOB)} not loaded: the last start of rank {rank} "
            "that loaded it did not reach its first step; compiling cold, and the blob is "
            "written anew after the first step",
            stacklevel=2,
        )
        return
    store.write(marker, b"")
    report.marker = marker
    try:
        data = store.read(BLOB)
        info = torch.compiler.load_cache_artifacts(data)
    except Exception as exc:  # a stale or foreign cache costs a cold compile, never the job
        warnings.warn(f"compile cache {store.describe(BLOB)} not loaded: {exc}", stacklevel=2)
        return
    report.loaded_bytes = len(data)
    report.loaded_entries = _entries(info)


def first_step_done(store: CheckpointStore, report: CacheReport) -> None:
    """The blob this rank loaded got it to a first step: its start-up marker goes."""
    if report.marker is not None:
        store.delete(report.marker)
        report.marker = None


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
    store.write(BLOB, data)
    report.saved_bytes = len(data)
    report.saved_entries = _entries(info)
