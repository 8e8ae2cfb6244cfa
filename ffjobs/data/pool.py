"""The worker processes that inspect files, fed while the dataset is still being listed.

On a machine with few cores every millisecond this process spends (listing, the tail where
one worker still runs while the other has finished, its own bookkeeping) is taken from the
workers. So files are handed out as the listing finds them, the workers start only once a
full chunk needs reading (an unchanged dataset starts none), the last chunks shrink so that
every worker finishes at about the same time, and each worker talks to this process over its
own pipe: no helper threads (``multiprocessing.Pool`` spent a third as much CPU in its three
threads as the workers spent decoding), and a worker that dies is reported with its own error,
not waited for. Workers start as :mod:`ffjobs.data.worker_process` says (an Airflow task too).
"""

from __future__ import annotations

import json
import os
import signal
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from types import TracebackType

from ffjobs.config.data import ValidationConfig
from ffjobs.data.inspect import Facts, inspect_paths
from ffjobs.data.sources import FileStat, Source
from ffjobs.data.worker_process import WorkerProcess

CHUNK = 32
"""Files per worker task: large enough to amortise inter-process traffic, small enough to balance."""
MIN_CHUNK = 4
"""Smallest task at the tail: below it the traffic per task costs more than the balance gains."""
DEPTH = 2
"""Tasks queued per worker: one in hand and one waiting, so it never waits for this process."""

ChunkResult = list[tuple[FileStat, Facts, str | None]]


class WorkerDied(RuntimeError):
    """A validation worker process ended without answering (its own error, a signal)."""


def _inspect_chunk(
    source: Source, paths: list[str], max_pixels: int, formats: frozenset[str]
) -> list[tuple[str, Facts, str]]:
    """A worker's answer for one chunk: each file's facts, also JSON-encoded for the cache
    (the parent shares the cores with the workers: whatever it does per file slows them)."""
    inspected = inspect_paths(source, paths, max_pixels, formats)
    return [(path, facts, json.dumps(facts)) for path, facts in inspected]


def _serve(
    connection: Connection, source: Source, max_pixels: int, formats: frozenset[str]
) -> None:
    """Worker process: inspect each chunk of paths received, answer with its results."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while (paths := connection.recv()) is not None:
        try:
            answer: object = _inspect_chunk(source, paths, max_pixels, formats)
        except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
            answer = RuntimeError(f"inspecting {paths[0]} and {len(paths) - 1} more: {exc!r}")
        connection.send(answer)


@dataclass
class _Worker:
    process: WorkerProcess
    chunks: deque[list[str]] = field(default_factory=deque)
    """Chunks sent and not answered yet, oldest first (answers come back in order)."""

    @property
    def connection(self) -> Connection:
        return self.process.connection


def _died(worker: _Worker) -> WorkerDied:
    worker.process.join(timeout=5)
    lost = worker.chunks[0]
    return WorkerDied(
        f"validation worker {worker.process.pid} {worker.process.how_it_ended()}, while "
        f"inspecting one of {len(lost)} files, {lost[0]} to {lost[-1]} in listing order"
    )


class InspectionPool:
    """Inspect files in worker processes (or in this one for one worker or a handful of files).

    :meth:`offer` files while listing; :meth:`results` then adds the rest and yields every
    chunk's ``(file, facts, facts as JSON or None)`` as it completes. Use as a context
    manager: leaving it early (an error, a cached report) stops the workers.
    """

    def __init__(self, source: Source, config: ValidationConfig):
        self._source = source
        self._max_pixels = config.max_pixels
        self._formats = frozenset(config.allowed_formats)
        self.workers = config.workers or len(os.sched_getaffinity(0))
        # Held back from the workers while listing: the tail is cut from these in small chunks.
        self._reserve = self.workers * CHUNK
        self._pending: list[str] = []
        self._stats: dict[str, FileStat] = {}
        self._running: list[_Worker] = []
        self._answers: list[list[tuple[str, Facts, str]]] = []

    def offer(self, stat: FileStat) -> None:
        """A file that will need inspecting: queued now, read as soon as a worker is free."""
        if stat.path in self._stats:
            return
        self._stats[stat.path] = stat
        self._pending.append(stat.path)
        if self.workers > 1 and len(self._pending) >= CHUNK + self._reserve:
            self._collect(block=False)
            self._dispatch(tail=False)

    def results(self, stats: list[FileStat]) -> Iterator[ChunkResult]:
        """Inspect ``stats`` (files already offered are not read twice), yielding per chunk;
        everything offered earlier is yielded too."""
        for stat in stats:
            self.offer(stat)
        if not self._running and (self.workers == 1 or len(self._pending) <= CHUNK):
            while self._pending:
                chunk = self._pending[:CHUNK]
                del self._pending[:CHUNK]
                inspected = inspect_paths(self._source, chunk, self._max_pixels, self._formats)
                yield [(self._stats[path], facts, None) for path, facts in inspected]
            return
        while True:
            self._dispatch(tail=True)
            for answer in self._answers:
                yield [(self._stats[path], facts, encoded) for path, facts, encoded in answer]
            self._answers.clear()
            if not any(worker.chunks for worker in self._running):
                return
            self._collect(block=True)

    def _dispatch(self, tail: bool) -> None:
        """Top every worker up to :data:`DEPTH` chunks; ``tail``: no reserve, shrinking sizes."""
        if not self._running:
            self._start(min(self.workers, len(self._pending) // CHUNK + 1))
        for worker in self._running:
            while len(worker.chunks) < DEPTH and self._pending:
                if not tail and len(self._pending) < CHUNK + self._reserve:
                    return
                # Guided sizes: full chunks while plenty remain, then smaller and smaller ones.
                share = -(-len(self._pending) // (2 * self.workers))
                self._submit(worker, max(MIN_CHUNK, min(CHUNK, share)) if tail else CHUNK)

    def _submit(self, worker: _Worker, size: int) -> None:
        chunk = self._pending[:size]
        del self._pending[:size]
        worker.chunks.append(chunk)
        try:
            worker.connection.send(chunk)
        except OSError:
            raise _died(worker) from None

    def _collect(self, block: bool) -> None:
        """Receive the answers that are ready (``block``: wait for at least one)."""
        busy = {worker.connection: worker for worker in self._running if worker.chunks}
        if not busy:
            return
        for connection in wait(list(busy), timeout=None if block else 0):
            worker = busy[connection]  # type: ignore[index]
            try:
                answer = worker.connection.recv()
            except (EOFError, OSError):
                raise _died(worker) from None
            worker.chunks.popleft()
            if isinstance(answer, BaseException):
                raise answer
            self._answers.append(answer)

    def _start(self, processes: int) -> None:
        for number in range(processes):
            process = WorkerProcess(
                _serve,
                (self._source, self._max_pixels, self._formats),
                name=f"ffjobs-validate-{number}",
            )
            self._running.append(_Worker(process))

    def close(self) -> None:
        """Stop the workers: at once if work is still outstanding (an early exit)."""
        for worker in self._running:
            if worker.chunks:
                worker.process.terminate()
            else:
                try:
                    worker.connection.send(None)
                except OSError:
                    worker.process.terminate()  # it is gone already
        for worker in self._running:
            worker.process.join()
            worker.process.close()
        self._running.clear()

    def __enter__(self) -> InspectionPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
