"""torch.compile's caches kept in the run's checkpoint store, so a restarted job compiles warm.

After the first compiled step, rank 0 takes the compiler's cache entries of this process
(``torch.compiler.save_cache_artifacts``: Inductor's compiled graphs and kernels, AOTAutograd's
forward/backward graphs, autotuning results) and writes them as one blob beside the
checkpoints, so it works for a shared directory and for ``s3://`` alike. A later job of the
same run loads the blob on every rank before its first step (``load_cache_artifacts`` fills the
local caches), and compiling becomes cache lookups. A blob that does not load (another torch,
another GPU) is ignored with a warning: the job then compiles cold, as without it.

Where torch can, the blob also carries Dynamo's own output (its traced bytecode and guards:
``torch._dynamo.config.caching_precompile``), so a restarted job does not trace the networks
again either. Dynamo keys that output by the compiled function's name, so it is turned on only
for one rank: with DDP, G and D are both compiled through ``DistributedDataParallel.forward``
and one's entry would replace the other's.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ffjobs.train.storage import CheckpointStore

BLOB = "compile-cache.bin"


@dataclass
class CacheReport:
    """What one process did with the blob."""

    loaded_entries: int = 0
    loaded_bytes: int = 0
    saved_entries: int = 0
    saved_bytes: int = 0


def precompile_supported() -> bool:
    """Whether this torch's ``save_cache_artifacts`` writes Dynamo's entries into the blob."""
    import torch._dynamo.config

    try:
        from torch._dynamo.precompile_context import PrecompileContext
    except ImportError:
        return False
    return hasattr(torch._dynamo.config, "caching_precompile") and hasattr(
        PrecompileContext, "save_to_dynamo_cache"
    )


def use_precompile(world_size: int) -> bool:
    """Turn on Dynamo's caching precompile for this process where it is safe; say if it is on.

    One rank only (see the module docstring). Set before the networks are compiled:
    ``torch.compile`` looks up the cached entry when it wraps a function.
    """
    import torch._dynamo.config

    if world_size != 1 or not precompile_supported():
        return False
    torch._dynamo.config.caching_precompile = True
    guards_log = logging.getLogger("torch._dynamo.guards")
    if not any(isinstance(f, _DroppedIdentityGuards) for f in guards_log.filters):
        guards_log.addFilter(_DroppedIdentityGuards())
    return True


class _DroppedIdentityGuards(logging.Filter):
    """Keeps out of the job's log the warning torch writes for every identity guard (on a
    global function or module) that a cached entry cannot hold: dozens per job, by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "dropped with caching_precompile" not in record.getMessage()


def compiled(fn: Callable[..., Any], mode: str | None) -> Callable[..., Any]:
    """``torch.compile(fn, mode=mode)`` (``fn`` itself for ``None``: eager); a cached Dynamo
    entry that does not install costs a cold trace.

    With caching precompile, ``torch.compile`` installs ``fn``'s entry from the loaded blob
    right away, and torch lets only some of the ways that fails pass (a stale or foreign
    entry can raise anything while its guards are unpickled).
    """
    import torch

    if mode is None:
        return fn
    try:
        return torch.compile(fn, mode=mode)
    except Exception as exc:
        if not torch._dynamo.config.caching_precompile:
            raise
        name = getattr(fn, "__qualname__", type(fn).__qualname__)
        warnings.warn(f"cached compile of {name} not used: {exc}", stacklevel=2)
        with torch._dynamo.config.patch(caching_precompile=False):
            return torch.compile(fn, mode=mode)


def _entries(info: object) -> int:
    return sum(len(keys) for keys in getattr(info, "artifacts", {}).values())


def load(store: CheckpointStore, report: CacheReport) -> None:
    """Fill this process's compiler caches from the store's blob, if it has one."""
    import torch

    if BLOB not in store.list():
        return
    try:
        data = store.read(BLOB)
        info = torch.compiler.load_cache_artifacts(data)
    except Exception as exc:  # a stale or foreign cache costs a cold compile, never the job
        warnings.warn(f"compile cache {store.describe(BLOB)} not loaded: {exc}", stacklevel=2)
        return
    report.loaded_bytes = len(data)
    report.loaded_entries = _entries(info)


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
