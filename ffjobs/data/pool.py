"""The worker pool that inspects files, fed while the dataset is still being listed.

On a machine with few cores every millisecond the parent spends alone (listing, the tail
where one worker still runs while the other has finished) is a core left idle. So files are
handed to the workers as the listing finds them, the pool starts only once a full chunk needs
reading (an unchanged dataset never forks), and the last chunks shrink so that every worker
finishes at about the same time.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
from collections.abc import Iterator
from multiprocessing.pool import Pool
from types import TracebackType

from ffjobs.data.config import ValidationConfig
from ffjobs.data.inspect import Facts, init_worker, inspect_chunk, inspect_file
from ffjobs.data.sources import FileStat, Source

CHUNK = 32
"""Files per worker task: large enough to amortise inter-process traffic, small enough to balance."""
MIN_CHUNK = 4
"""Smallest task at the tail: below it the traffic per task costs more than the balance gains."""

ChunkResult = list[tuple[FileStat, Facts, str | None]]


def _pool_context() -> multiprocessing.context.BaseContext:
    # fork starts workers in milliseconds; it is only safe while this process has no threads.
    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class InspectionPool:
    """Inspect files in worker processes (or in this one for one worker or a handful of files).

    :meth:`offer` files while listing; :meth:`results` then adds the rest and yields every
    chunk's ``(file, facts, facts as JSON or None)`` as it completes. Use as a context manager: leaving
    it early (an error, a cached report) stops the workers.
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
        self._pool: Pool | None = None
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._outstanding = 0

    def offer(self, stat: FileStat) -> None:
        """A file that will need inspecting: queued now, read as soon as a worker is free."""
        if stat.path in self._stats:
            return
        self._stats[stat.path] = stat
        self._pending.append(stat.path)
        if self.workers > 1 and len(self._pending) >= CHUNK + self._reserve:
            self._submit(CHUNK)

    def results(self, stats: list[FileStat]) -> Iterator[ChunkResult]:
        """Inspect ``stats`` (files already offered are not read twice), yielding per chunk;
        everything offered earlier is yielded too."""
        for stat in stats:
            self.offer(stat)
        if self._pool is None and (self.workers == 1 or len(self._pending) <= CHUNK):
            while self._pending:
                chunk = self._pending[:CHUNK]
                del self._pending[:CHUNK]
                yield [
                    (
                        self._stats[p],
                        inspect_file(self._source, p, self._max_pixels, self._formats),
                        None,
                    )
                    for p in chunk
                ]
            return
        while self._pending:
            # Guided sizes: full chunks while plenty remain, then smaller and smaller ones.
            share = -(-len(self._pending) // (2 * self.workers))
            self._submit(max(MIN_CHUNK, min(CHUNK, share)))
        while self._outstanding:
            done = self._done.get()
            self._outstanding -= 1
            if isinstance(done, BaseException):
                raise done
            yield [(self._stats[path], facts, encoded) for path, facts, encoded in done]

    def _submit(self, size: int) -> None:
        if self._pool is None:
            processes = min(self.workers, len(self._pending) // CHUNK + 1)
            self._pool = _pool_context().Pool(
                processes, init_worker, (self._source, self._max_pixels, self._formats)
            )
        chunk = self._pending[:size]
        del self._pending[:size]
        self._outstanding += 1
        # Callbacks run on the pool's result thread: a queue hands results to this one.
        self._pool.apply_async(
            inspect_chunk, (chunk,), callback=self._done.put, error_callback=self._done.put
        )

    def close(self) -> None:
        """Stop the workers: at once if work is still outstanding (an early exit)."""
        if self._pool is None:
            return
        if self._outstanding:
            self._pool.terminate()
        else:
            self._pool.close()
        self._pool.join()
        self._pool = None

    def __enter__(self) -> InspectionPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
