"""Checkpoints as the unit of truth: atomic, verified, keep-last-K, with every rank's RNG state.

Layout in the store (a local shared directory or ``s3://``)::

    step-00000050.pt     torch.save of the whole training state (loaded with weights_only=True)
    step-00000050.json   manifest: step, file, size, sha256, world size

The manifest is written after the data file, so a manifest always names a complete file; a
checkpoint whose file is missing, truncated or altered fails verification, and
:meth:`Checkpointer.latest_verified` falls back to the previous one with a warning naming it.

A matching sha256 says the file is the one its manifest names, not who wrote it: whoever can
write to the store can rewrite both. So a checkpoint is only ever deserialised as tensors and
plain containers (``torch.load(weights_only=True)``: nothing in it can run code), and one
that does not load that way is refused by name, in one line, and
:meth:`Checkpointer.load_latest` falls back to the previous one that does.

RNG states are per rank: every rank's states are gathered to rank 0 (``all_gather_object``)
and written into the one file, so a restart with the same world size continues each rank's
random stream exactly.

Asynchronous save (``asynchronous=True``): training is blocked only while the state is copied
into a shared host buffer reused from save to save (:class:`~ffjobs.train.checkpoint.snapshot.HostSnapshot`);
serialising, hashing and writing run in a writer process
(:mod:`ffjobs.train.checkpoint.writer`), so they do not take the interpreter from the training
loop. The next save, :meth:`Checkpointer.wait` and :meth:`Checkpointer.latest_verified` wait
for the write in flight; :meth:`Checkpointer.close` also stops the writer. A crash during the
write leaves at most a hidden temporary file and no manifest, so the previous verified
checkpoint stays the latest one.

Storage that refuses a write (full, over quota, read-only, access denied) raises
:class:`~ffjobs.train.checkpoint.storage.StorageError` naming the folder and its free space, from
:meth:`Checkpointer.save` or, for a background write, from the next save or
:meth:`Checkpointer.wait`. Nothing of the refused checkpoint stays: the temporary file is
removed, and a data file whose manifest could not be written is deleted. The checkpoints
before it are untouched (pruning comes only after a complete write).

The package: :mod:`~.manager` (the :class:`Checkpointer`), :mod:`~.files` (names and the
listing), :mod:`~.state` (the safe load and the RNG states), :mod:`~.snapshot` (the host copy),
:mod:`~.writer` (the writer process), and :mod:`~.storage` (a local folder or S3). Opening a
run's checkpoints to find or verify one imports no torch; saving and loading do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ffjobs.train.checkpoint.files import data_name, manifest_name
    from ffjobs.train.checkpoint.manager import (
        Checkpointer,
        CheckpointWarning,
        latest_step,
        open_checkpoints,
    )
    from ffjobs.train.checkpoint.state import capture_rng_state, gather_to_rank0, restore_rng_state

_HOMES = {
    "data_name": "files",
    "manifest_name": "files",
    "Checkpointer": "manager",
    "CheckpointWarning": "manager",
    "capture_rng_state": "state",
    "gather_to_rank0": "state",
    "latest_step": "manager",
    "open_checkpoints": "manager",
    "restore_rng_state": "state",
}
"""Where each public name lives. They are imported on first use: importing a light part of the
package (:mod:`~.storage`, say, from the compile cache or a CLI command) must not import torch."""

__all__ = [
    "CheckpointWarning",
    "Checkpointer",
    "capture_rng_state",
    "data_name",
    "gather_to_rank0",
    "latest_step",
    "manifest_name",
    "open_checkpoints",
    "restore_rng_state",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
