"""torch.compile's caches kept in the run's checkpoint store, so a restarted job compiles warm.

After the first compiled step, rank 0 takes the compiler's cache entries of this process
(``torch.compiler.save_cache_artifacts``: Inductor's compiled graphs and kernels, AOTAutograd's
forward/backward graphs, autotuning results) and writes them as one blob beside the
checkpoints, so it works for a shared directory and for ``s3://`` alike. A later job of the
same run loads the blob on every rank before its first step (``load_cache_artifacts`` fills the
local caches), and compiling becomes cache lookups. A blob that does not load (another torch,
another GPU) is ignored with a warning: the job then compiles cold, as without it.

The kernels in the blob name the files they were compiled into, in the local cache folder of
the process that made it, and Inductor looks up each kernel's tuned launch configuration
beside that file. A job whose local folder (``TORCHINDUCTOR_CACHE_DIR``, by default
``<tmp>/torchinductor_<user>``: the same on nodes with the same temporary folder) is another
path misses every lookup and benchmarks every kernel again (seconds, at every start). The
folder is recorded beside the blob (``compile-cache.json``), and a job that loads the blob
into another folder says so in a warning.

The blob and the captures are code: Inductor's generated modules and pickles of graphs, run
when loaded. No format carries them without that, so instead of a safe format each file is
signed with the run's secret key (:mod:`ffjobs.train.compile.signing`, HMAC-SHA256; the key is kept
out of the store) and checked before anything in it is deserialised. Whoever can write to
the checkpoint folder or bucket but does not hold the key cannot get code run: an unsigned,
altered or foreign file is refused by name with a warning, and the job compiles cold.

That local folder is where a warm start writes what it loads: every Triton kernel of the
captures and the blob becomes a folder of files there, and Inductor's generated code a module
(written to node memory, a warm first step spends a fraction of what it spends writing them to
the temporary folder on disk). Unless the job names the folder, a compiling rank keeps it in
node memory (``/dev/shm/torchinductor_<user>``: the same path on every node that has one) where
``/dev/shm`` can take it (:func:`local_caches_root`), and in Inductor's default otherwise.

Beside the blob, ``compile-cache.regions.<device>.bin`` holds the Dynamo captures of the
compiled regions (:mod:`ffjobs.train.compile.regions`), so a restart loads the graphs instead of
tracing the networks again: one file per local device (``cuda0``, ``cuda1``, ``cpu``), since a
capture's guards name the device of its inputs; every rank writes its device's. It is used
only when its fingerprint (torch, the networks' code, the settings that shape the graphs) is
this job's.

A blob that loads but whose job then dies before its first step must not take every restart
down the same way: each rank leaves a marker (``compile-cache.rank<N>.starting``) before it
loads the blob and removes it once its first step is done. A rank that finds its own marker
from an earlier start compiles cold instead, with a warning, and rank 0 then writes a new
blob. A job killed during start-up for another reason costs its restart one cold compile.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field

from ffjobs.train.checkpoint.storage import CheckpointStore
from ffjobs.train.compile.signing import SignatureError, sign, verified_payload

BLOB = "compile-cache.bin"
MADE_IN = "compile-cache.json"
"""Beside the blob: the local compiler-cache folder of the process that made it."""


def regions_file(device: str) -> str:
    """Beside the blob, the region captures of the ranks on ``device`` (``cuda0``, ``cpu``),
    signed: a JSON line ``{"fingerprint": str, "regions": [[name, size], ...]}``, then each
    region's saved captures, in that order (:func:`pack_regions`)."""
    return f"compile-cache.regions.{device}.bin"


def device_name(device: object) -> str:
    """``cuda0`` for ``torch.device("cuda", 0)``, ``cpu`` for the CPU."""
    index = getattr(device, "index", None)
    return f"{device.type}{index}" if index is not None else str(device.type)


@dataclass
class CacheReport:
    """What one process did with the blob."""

    loaded_entries: int = 0
    loaded_bytes: int = 0
    saved_entries: int = 0
    saved_bytes: int = 0
    marker: str | None = None
    """The start-up marker this rank left in the store (until its first step)."""
    regions: dict[str, bytes] = field(default_factory=dict)
    """The compiled regions' saved captures this job loaded (name: bytes)."""
    regions_from: str = ""
    """Where ``regions`` was read (the store's description of the file)."""
    saved_regions: int = 0


def _entries(info: object) -> int:
    return sum(len(keys) for keys in getattr(info, "artifacts", {}).values())


def starting_marker(rank: int) -> str:
    """The marker rank ``rank`` keeps in the store from loading the blob to its first step."""
    return f"compile-cache.rank{rank}.starting"


def load(
    store: CheckpointStore,
    report: CacheReport,
    rank: int = 0,
    fingerprint: str | None = None,
    device: str = "cpu",
    *,
    key: bytes,
) -> None:
    """Fill this process's compiler caches from the store's blob, if it has one, and put the
    region captures saved on ``device`` for ``fingerprint`` into ``report.regions``; only
    files signed under ``key`` (the run's) are deserialised."""
    import torch

    names = store.list()
    captures = regions_file(device)
    if BLOB not in names and captures not in names:
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
    if captures in names and fingerprint is not None:
        report.regions = _read_regions(store, captures, fingerprint, key)
        report.regions_from = store.describe(captures)
    if BLOB not in names:
        return
    try:
        data = verified_payload(key, BLOB, store.read(BLOB))
    except SignatureError as exc:
        warnings.warn(_refused(store, BLOB, exc), stacklevel=2)
        return
    try:
        info = torch.compiler.load_cache_artifacts(data)
    except Exception as exc:  # a stale or foreign cache costs a cold compile, never the job
        warnings.warn(f"compile cache {store.describe(BLOB)} not loaded: {exc}", stacklevel=2)
        return
    report.loaded_bytes = len(data)
    report.loaded_entries = _entries(info)
    _warn_if_another_folder(store, names)


def _refused(store: CheckpointStore, name: str, error: SignatureError) -> str:
    return f"compile cache {store.describe(name)} refused, not loaded: {error}; compiling cold"


def _read_regions(
    store: CheckpointStore, name: str, fingerprint: str, key: bytes
) -> dict[str, bytes]:
    try:
        payload = verified_payload(key, name, store.read(name))
    except SignatureError as exc:
        warnings.warn(_refused(store, name, exc), stacklevel=3)
        return {}
    try:
        made_for, regions = unpack_regions(payload)
    except (ValueError, KeyError, TypeError) as exc:
        warnings.warn(f"compiled regions {store.describe(name)} not read: {exc}", stacklevel=3)
        return {}
    if made_for != fingerprint:
        warnings.warn(
            f"compiled regions {store.describe(name)} were captured for other code or "
            "settings (torch, the networks' code, model or precision); tracing them again",
            stacklevel=3,
        )
        return {}
    return regions


def pack_regions(fingerprint: str, regions: dict[str, bytes]) -> bytes:
    """The region file's payload: a JSON line (fingerprint, each region's name and size), then
    the captures; plain data, read back by :func:`unpack_regions` without unpickling."""
    header = {"fingerprint": fingerprint, "regions": [[n, len(b)] for n, b in regions.items()]}
    return json.dumps(header).encode() + b"\n" + b"".join(regions.values())


def unpack_regions(payload: bytes) -> tuple[str, dict[str, bytes]]:
    """``(fingerprint, {name: captures})`` of a :func:`pack_regions` payload."""
    line, _, body = payload.partition(b"\n")
    header = json.loads(line)
    regions, offset = {}, 0
    for name, size in header["regions"]:
        regions[str(name)] = body[offset : offset + int(size)]
        offset += int(size)
    if offset != len(body):
        raise ValueError(f"{len(body)} bytes of captures where the header says {offset}")
    return str(header["fingerprint"]), regions


NODE_MEMORY = "/dev/shm"
NODE_MEMORY_MIN_FREE = 2 << 30
"""Free room ``/dev/shm`` must have to take the local caches (the 256 px preset's: 134 MB a
rank), with room to spare for the job's own shared memory (data loader workers)."""


def local_caches_root() -> str:
    """The folder this node's local compiler caches go under: ``/dev/shm`` where it is
    writable, lets the shared objects built into it run (Triton's launchers, Inductor's C++
    kernels) and has :data:`NODE_MEMORY_MIN_FREE` free; else the temporary folder, as with
    Inductor's default."""
    try:
        fs = os.statvfs(NODE_MEMORY)
    except OSError:
        return tempfile.gettempdir()
    room = fs.f_bavail * fs.f_frsize
    if (
        room >= NODE_MEMORY_MIN_FREE
        and not fs.f_flag & (os.ST_NOEXEC | os.ST_RDONLY)
        and os.access(NODE_MEMORY, os.W_OK | os.X_OK)
    ):
        return NODE_MEMORY
    return tempfile.gettempdir()


def keep_local_caches_in_memory() -> None:
    """Unless the job names it (``TORCHINDUCTOR_CACHE_DIR``), put this process's local Inductor
    cache folder, and the Triton kernels Inductor keeps in it, under :func:`local_caches_root`,
    named as Inductor names its default (``torchinductor_<user>``). Call before compiling."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # a torch that names its folder elsewhere keeps its default
        return
    name = os.path.basename(default_cache_dir())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(local_caches_root(), name)


def local_cache_dir() -> str | None:
    """This process's Inductor cache folder (``None`` where this torch does not say)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        return None
    return cache_dir()


def _warn_if_another_folder(store: CheckpointStore, names: list[str]) -> None:
    """``names``: the store's listing, as ``load`` read it."""
    if MADE_IN not in names:
        return
    try:
        made_in = json.loads(store.read(MADE_IN))["inductor_cache_dir"]
    except (ValueError, KeyError, TypeError):
        return
    here = local_cache_dir()
    if here is not None and made_in is not None and here != made_in:
        warnings.warn(
            f"compile cache {store.describe(BLOB)} was made with the Inductor cache folder "
            f"{made_in}; this job's is {here}, so every Triton kernel's launch configuration "
            "is benchmarked again (seconds); set TORCHINDUCTOR_CACHE_DIR to one path for "
            "every job of a run",
            stacklevel=3,
        )


def first_step_done(store: CheckpointStore, report: CacheReport) -> None:
    """The blob this rank loaded got it to a first step: its start-up marker goes."""
    if report.marker is not None:
        store.delete(report.marker)
        report.marker = None


def save_regions(
    store: CheckpointStore,
    report: CacheReport,
    regions: dict[str, bytes],
    fingerprint: str,
    device: str = "cpu",
    *,
    key: bytes,
) -> None:
    """Write ``regions`` (the captures of the regions that captured in this process), with
    the ones loaded for the others, as ``device``'s region file signed under ``key`` (every
    rank, once); nothing when no region captured here."""
    if not regions:
        return
    name = regions_file(device)
    payload = pack_regions(fingerprint, {**report.regions, **regions})
    store.write(name, sign(key, name, payload))
    report.saved_regions = len(regions)


def save(store: CheckpointStore, report: CacheReport, *, key: bytes) -> None:
    """Write this process's compiler cache entries as the store's blob, signed under ``key``
    (rank 0, once).

    Skipped when the blob was loaded at start: the entries are the ones it already holds.
    """
    import torch

    if report.loaded_entries:
        return
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is None:
        return
    data, info = artifacts
    store.write(MADE_IN, json.dumps({"inductor_cache_dir": local_cache_dir()}).encode())
    store.write(BLOB, sign(key, BLOB, data))
    report.saved_bytes = len(data)
    report.saved_entries = _entries(info)
