"""A checkpoint's files in a store: the names, the write (data file, then its manifest), the
steps found and the pruning. Used by :class:`~ffjobs.train.checkpoint.Checkpointer` in the
training process and by the checkpoint writer process (:mod:`ffjobs.train.checkpoint.writer`).
Only the write imports torch: the names and the listing serve readers that do not."""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ffjobs.train.checkpoint.storage import CheckpointStore

_MANIFEST = re.compile(r"step-(\d+)\.json")


def data_name(step: int) -> str:
    return f"step-{step:08d}.pt"


def manifest_name(step: int) -> str:
    return f"step-{step:08d}.json"


def checkpoint_steps(store: CheckpointStore) -> list[int]:
    """Steps that have a manifest in ``store``, newest first."""
    found = [int(m.group(1)) for n in store.list() if (m := _MANIFEST.fullmatch(n))]
    return sorted(found, reverse=True)


def prune_checkpoints(store: CheckpointStore, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints; delete the rest (manifest first)."""
    for step in checkpoint_steps(store)[keep:]:
        store.delete(manifest_name(step))
        store.delete(data_name(step))


@contextmanager
def _zip_crc32(compute: bool) -> Iterator[None]:
    """``torch.save`` computing its zip records' CRC-32 or not, for the block (then as before)."""
    import torch

    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(compute)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(before)


def write_checkpoint_files(store: CheckpointStore, step: int, payload: dict[str, Any]) -> None:
    """Serialise, write the data file, then its manifest (only now is it verified).

    One pass of copies: the zip records carry no CRC-32 (the manifest's sha256 over the
    whole file is the check, made before anything is loaded), the file is written from the
    serialised buffer itself, and the hash is taken on a thread beside the file write (both
    release the interpreter).
    """
    import torch

    buffer = io.BytesIO()
    with _zip_crc32(False):
        torch.save(payload, buffer)
    data = buffer.getbuffer()
    name = data_name(step)
    digest: list[str] = []
    hasher = threading.Thread(
        target=lambda: digest.append(hashlib.sha256(data).hexdigest()), name="checkpoint-hash"
    )
    hasher.start()
    try:
        store.write(name, data)
    finally:
        hasher.join()
    manifest = {
        "step": step,
        "file": name,
        "size": data.nbytes,
        "sha256": digest[0],
        "world_size": len(payload["rank_states"]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    data.release()
    try:
        store.write(manifest_name(step), json.dumps(manifest, indent=1).encode())
    except BaseException:  # a data file without its manifest is never loaded: free its space
        with suppress(Exception):
            store.delete(name)
        raise
