"""The checkpoint manager (:class:`Checkpointer`): save, verify, load and prune one run's
checkpoints, and :func:`open_checkpoints`, the one way to open them. The package docstring
(:mod:`ffjobs.train.checkpoint`) says how a checkpoint is laid out and kept safe."""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ffjobs.config.s3 import S3Config
from ffjobs.train.checkpoint.files import (
    checkpoint_steps,
    data_name,
    manifest_name,
    prune_checkpoints,
    write_checkpoint_files,
)
from ffjobs.train.checkpoint.storage import CheckpointStore, StorageError, open_store

if TYPE_CHECKING:
    from ffjobs.config import Config
    from ffjobs.train.checkpoint.snapshot import HostSnapshot
    from ffjobs.train.checkpoint.writer import CheckpointWriter


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it failed verification."""


@dataclass
class CheckpointRef:
    """A checkpoint that passed verification."""

    step: int
    name: str
    location: str
    _data: bytes | None = field(default=None, repr=False)


@dataclass
class SaveTiming:
    """Where the time of one save went, in seconds."""

    step: int
    blocked_s: float
    """Training blocked: barrier, RNG gather, host snapshot, waiting for the previous write."""
    write_s: float | None = None
    """Serialise, hash, write and prune (in the writer process when asynchronous)."""


# --------------------------------------------------------------------------- the checkpointer


class Checkpointer:
    """Save, verify, prune and load training checkpoints in one store."""

    def __init__(
        self,
        location: str,
        keep: int = 3,
        store: CheckpointStore | None = None,
        s3: S3Config | None = None,
    ):
        """``store``: a store object instead of ``open_store(location, s3)``; asynchronous saves
        hand it to the writer process, so it must be picklable."""
        self.store = store if store is not None else open_store(location, s3=s3)
        self.keep = keep
        # made at the first asynchronous save (:meth:`_background`): opening a run's
        # checkpoints to find or verify one (the CLI, the supervisor) imports no torch
        self._writer: CheckpointWriter | None = None
        self._snapshot: HostSnapshot | None = None
        self._write_error: BaseException | None = None
        self.timings: list[SaveTiming] = []

    @property
    def location(self) -> str:
        return self.store.location

    @property
    def writing(self) -> bool:
        """Whether an asynchronous write is in flight."""
        return self._writer is not None and self._writer.busy

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid once an asynchronous save has started it."""
        return self._writer.pid if self._writer is not None else None

    def save(
        self,
        step: int,
        state: dict[str, Any],
        rank_state: dict[str, Any],
        *,
        asynchronous: bool = False,
        on_written: Callable[[str], None] | None = None,
    ) -> str | None:
        """Collective: all ranks call it; rank 0 writes ``state`` plus every rank's ``rank_state``.

        Returns the data file's location on rank 0, ``None`` elsewhere. ``asynchronous``: return
        once the state is copied to shared host memory and write it in the writer process; the
        file is verified only once its manifest is written (``on_written(name)`` is called
        then, on rank 0, on a thread of this process). A failed background write raises at the
        next save or :meth:`wait`. Where ``/dev/shm`` cannot hold the snapshot the save is
        synchronous, with a :class:`CheckpointWarning` saying so.
        """
        from ffjobs.train.checkpoint.state import gather_to_rank0
        from ffjobs.train.distributed import barrier, get_rank

        started = time.perf_counter()
        barrier()  # every rank has finished this step before the state is taken
        rank_states = gather_to_rank0(rank_state)
        if get_rank() != 0:
            return None
        self.wait()  # one write in flight at most: its memory and its order on disk
        payload = {**state, "step": step, "rank_states": rank_states}
        timing = SaveTiming(step=step, blocked_s=0.0)
        self.timings.append(timing)
        snapshot = None
        if asynchronous:
            from ffjobs.train.checkpoint.snapshot import SharedMemoryTooSmall, encode

            host, writer = self._background()
            try:
                snapshot = host.take(payload)
            except SharedMemoryTooSmall as exc:
                warnings.warn(
                    f"{exc}: writing checkpoint step {step} synchronously (give the job more "
                    "shared memory, e.g. docker --shm-size, or set train.async_checkpoint=false)",
                    CheckpointWarning,
                    stacklevel=2,
                )
        if snapshot is None:
            write_started = time.perf_counter()
            self.write(step, payload)
            timing.write_s = time.perf_counter() - write_started
            timing.blocked_s = time.perf_counter() - started
            if on_written is not None:
                on_written(data_name(step))
            return self.store.describe(data_name(step))

        def done(write_s: float | None, error: BaseException | None) -> None:
            timing.write_s = write_s
            if error is not None:  # handed to the training thread at its next save or wait
                self._write_error = error
            elif on_written is not None:
                on_written(data_name(step))

        assert host.buffer is not None
        writer.submit(step, host.buffer, encode(host, snapshot), done)
        timing.blocked_s = time.perf_counter() - started
        return self.store.describe(data_name(step))

    def _background(self) -> tuple[HostSnapshot, CheckpointWriter]:
        """The host snapshot and the writer of asynchronous saves, made at the first one (the
        writer's process starts at its first write)."""
        if self._snapshot is None or self._writer is None:
            from ffjobs.train.checkpoint.snapshot import HostSnapshot
            from ffjobs.train.checkpoint.writer import CheckpointWriter

            self._snapshot = HostSnapshot()
            self._writer = CheckpointWriter(self.store, self.keep)
        return self._snapshot, self._writer

    def wait(self) -> None:
        """Block until the background write in flight (if any) is complete; re-raise its error."""
        if self._writer is not None:
            self._writer.wait()
        if self._write_error is not None:
            error, self._write_error = self._write_error, None
            if isinstance(error, StorageError):  # the store's own words say it all
                raise StorageError(f"background checkpoint write failed: {error}", error.code)
            raise RuntimeError(f"background checkpoint write failed: {error}") from error

    def close(self) -> None:
        """Wait for the write in flight (re-raising its error), stop the writer, free the buffer."""
        try:
            if self._writer is not None:
                self._writer.close()
            self.wait()
        finally:
            if self._snapshot is not None:
                self._snapshot.release()

    def write(self, step: int, payload: dict[str, Any]) -> None:
        """Write one checkpoint's files (:func:`write_checkpoint_files`), then prune."""
        write_checkpoint_files(self.store, step, payload)
        self.prune()

    def steps(self) -> list[int]:
        """Steps that have a manifest, newest first."""
        return checkpoint_steps(self.store)

    def prune(self) -> None:
        """Keep the newest ``keep`` checkpoints; delete the rest (manifest first)."""
        prune_checkpoints(self.store, self.keep)

    def verify(self, step: int) -> tuple[bool, str, bytes | None]:
        """Check one checkpoint against its manifest: ``(ok, reason, data)``."""
        try:
            manifest = json.loads(self.store.read(manifest_name(step)))
            expected_size, expected_sha = int(manifest["size"]), str(manifest["sha256"])
        except Exception as exc:  # unreadable or malformed manifest: the checkpoint is unusable
            return False, f"manifest unreadable ({exc})", None
        try:
            data = self.store.read(data_name(step))
        except Exception as exc:
            return False, f"data file unreadable ({exc})", None
        if len(data) != expected_size:
            return False, f"size {len(data)} != {expected_size} in manifest (truncated?)", None
        if hashlib.sha256(data).hexdigest() != expected_sha:
            return False, "sha256 differs from manifest (corrupted)", None
        return True, "ok", data

    def latest(self) -> CheckpointRef | None:
        """The newest checkpoint whose manifest reads and whose data file has the size the
        manifest names: its step and location, found from the manifests and one size look-up
        each, without reading the data. Verification (reading and hashing the whole file) comes
        just before a load (:meth:`load_latest`), which falls back past a corrupted one."""
        self.wait()  # a write of ours in flight is the newest checkpoint once it is complete
        for step in self.steps():
            name = data_name(step)
            try:
                manifest = json.loads(self.store.read(manifest_name(step)))
                complete = self.store.size(name) == int(manifest["size"])
            except Exception:  # unreadable manifest or missing data: not a complete checkpoint
                complete = False
            if complete:
                return CheckpointRef(step, name, self.store.describe(name))
        return None

    def latest_verified(self) -> CheckpointRef | None:
        """The newest checkpoint that passes verification; skipped ones are warned about by name."""
        return next(self._verified(), None)

    def load_latest(self) -> tuple[CheckpointRef, dict[str, Any]] | None:
        """The newest checkpoint that passes verification and loads safely, with its state;
        each one skipped is warned about by name, in one line, and the previous one tried."""
        from ffjobs.train.checkpoint.state import UnsafeCheckpoint

        for ref in self._verified():
            try:
                return ref, self.load(ref)
            except UnsafeCheckpoint as exc:
                _skipped(f"{exc}; falling back to the previous one")
        return None

    def _verified(self) -> Iterator[CheckpointRef]:
        """The checkpoints that pass verification, newest first; those that do not are
        warned about as they are passed."""
        self.wait()  # a write of ours in flight is the newest checkpoint once it is complete
        for step in self.steps():
            ok, reason, data = self.verify(step)
            if ok:
                yield CheckpointRef(
                    step, data_name(step), self.store.describe(data_name(step)), data
                )
                continue
            _skipped(
                f"skipping checkpoint {self.store.describe(data_name(step))}: {reason}; "
                "falling back to the previous one"
            )

    def load(self, ref: CheckpointRef) -> dict[str, Any]:
        """Deserialise a verified checkpoint onto the CPU (tensors and plain containers only;
        :class:`~.state.UnsafeCheckpoint` for a file that holds anything else)."""
        from ffjobs.train.checkpoint.state import safe_load

        data = ref._data
        if data is None:
            ok, reason, data = self.verify(ref.step)
            if not ok or data is None:
                raise RuntimeError(f"checkpoint {ref.location} failed verification: {reason}")
        return safe_load(data, ref.location)


def open_checkpoints(config: Config, location: str) -> Checkpointer:
    """A run's checkpoints at ``location`` (``<train.checkpoint_dir>/<run key>``, local or
    ``s3://``), opened as the run's config says: its ``s3:`` section (endpoint, credentials) and
    ``train.keep_checkpoints``. Every reader of a run's checkpoints opens them here."""
    return Checkpointer(location, keep=config.train.keep_checkpoints, s3=config.s3)


def latest_step(config: Config, location: str) -> int | None:
    """The step of the latest verified checkpoint at ``location`` (from its manifests), or
    ``None`` when there is none or the storage cannot be reached (training will say so)."""
    try:
        ref = open_checkpoints(config, location).latest()
    except Exception:  # unreachable storage: training will say so
        return None
    return ref.step if ref is not None else None


def _skipped(message: str) -> None:
    """Warn, in one line, that a checkpoint was passed over."""
    # stacklevel 4: the caller of latest_verified / load_latest
    warnings.warn(" ".join(message.split()), CheckpointWarning, stacklevel=4)
