"""The asynchronous checkpoint's writer: a long-lived process that writes host snapshots.

Serialising a gigabyte of state, hashing it and writing it take seconds of Python; on a thread
they hold the interpreter the training loop needs to launch its kernels. The writer is a
process of its own (spawn context, started at the first asynchronous save): it maps the
snapshot's shared buffer (:mod:`ffjobs.train.checkpoint.snapshot`), rebuilds the state and writes it
through its own copy of the store exactly as a synchronous save does
(:meth:`ffjobs.train.checkpoint.Checkpointer.write`: data file, manifest, prune). A thread of
the parent waits for its answer and reports the write's time or error.

The writer ignores SIGINT and SIGTERM (the trainer answers those with a last checkpoint, which
the writer must live to write); it exits when told to (after the write in flight) and at the
parent's normal exit (atexit); it is killed as soon as its parent dies, whatever killed that
(the kernel's parent-death signal, :mod:`ffjobs.process_tree`), even mid-write. A writer killed
mid-write leaves at most a hidden temporary file and no manifest, as any crash does. As with
any spawned process, a script that saves asynchronously keeps its top level under
``if __name__ == "__main__":`` (the writer imports the main module).
"""

from __future__ import annotations

import atexit
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import torch
import torch.multiprocessing

from ffjobs.process_tree import die_with_parent
from ffjobs.train.checkpoint.snapshot import decode

if TYPE_CHECKING:
    from ffjobs.train.checkpoint.storage import CheckpointStore

POLL_S = 0.5  # how often an idle writer looks for its parent (without a parent-death signal)
NICENESS = 10
"""The writer's scheduling priority below the trainer's: where cores are short, the training
loop (which launches the kernels) goes first and the write takes longer."""
OnDone = Callable[[float | None, BaseException | None], None]


class CheckpointWriter:
    """The parent's handle on the writer process: submit one write at a time, wait, close."""

    def __init__(self, store: CheckpointStore, keep: int):
        self._store, self._keep = store, keep
        self._process: Any = None
        self._requests: Any = None
        self._results: Connection | None = None
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def submit(self, step: int, buffer: torch.Tensor, encoded: bytes, on_done: OnDone) -> None:
        """Hand the snapshot (``encoded`` against the shared ``buffer``) to the writer.

        ``on_done(write_s, error)`` is called on a thread of this process once the writer
        answers, or with an error if it dies first. The caller waits for the previous write.
        """
        if self._process is not None and not self._process.is_alive():
            self.close()  # it died (killed mid-write, say): a new one takes over
        if self._process is None:
            self._start()
        self._requests.put((step, buffer, encoded))
        self._watcher = threading.Thread(
            target=self._watch, args=(step, on_done), name=f"checkpoint-watch-{step}", daemon=True
        )
        self._watcher.start()

    @property
    def busy(self) -> bool:
        """Whether a write is in flight (not answered yet)."""
        return self._watcher is not None and self._watcher.is_alive()

    def wait(self) -> None:
        """Block until the write in flight (if any) is answered."""
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None

    def close(self) -> None:
        """Finish the write in flight, then stop the writer process."""
        self.wait()
        atexit.unregister(self.close)
        process, self._process = self._process, None
        if process is None:
            return
        if process.is_alive():
            self._requests.put(None)
            process.join(timeout=60)
        if process.is_alive():  # it should not hang, but a hung writer must not outlive us
            process.kill()
            process.join()
        self._requests.close()
        self._requests.join_thread()
        if self._results is not None:
            self._results.close()

    def _start(self) -> None:
        context = torch.multiprocessing.get_context("spawn")
        self._requests = context.Queue()
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=serve,
            args=(self._store, self._keep, self._requests, writer, os.getpid()),
            name="ffjobs-checkpoint-writer",
            daemon=True,  # never outlives us; close() (atexit too) lets the write finish first
        )
        try:
            process.start()
        except Exception as exc:  # e.g. a store that does not pickle
            raise RuntimeError(
                f"cannot start the checkpoint writer process for {self._store.location} "
                f"({type(self._store).__name__}): {exc}"
            ) from exc
        finally:
            writer.close()
        self._process, self._results = process, reader
        atexit.register(self.close)

    def _watch(self, step: int, on_done: OnDone) -> None:
        process, results = self._process, self._results
        assert process is not None and results is not None
        wait([results, process.sentinel])
        answer: tuple[int, float | None, BaseException | None] | None = None
        if results.poll():
            try:
                answer = results.recv()
            except (EOFError, OSError):
                answer = None
        if answer is None:
            process.join(timeout=5)
            on_done(
                None,
                RuntimeError(
                    f"the checkpoint writer process (pid {process.pid}) exited with code "
                    f"{process.exitcode} while writing step {step}"
                ),
            )
            return
        _, write_s, error = answer
        on_done(write_s, error)


def serve(
    store: CheckpointStore, keep: int, requests: Any, results: Connection, parent_pid: int
) -> None:
    """The writer process: write each ``(step, buffer, encoded)`` request until told to stop."""
    from ffjobs.train.checkpoint.files import prune_checkpoints, write_checkpoint_files

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(NICENESS)
    while True:
        try:
            request = requests.get(timeout=POLL_S)
        except queue.Empty:
            if os.getppid() != parent_pid:  # the parent is gone: nobody will ask again
                return
            continue
        if request is None:
            return
        step, buffer, encoded = request
        started = time.perf_counter()
        try:
            write_checkpoint_files(store, step, decode(encoded, buffer))
            prune_checkpoints(store, keep)
            answer: tuple[int, float | None, BaseException | None] = (
                step,
                time.perf_counter() - started,
                None,
            )
        except Exception as exc:
            answer = (step, None, exc)
        del request, buffer
        try:
            results.send(answer)
        except Exception:  # an exception that does not pickle still says what it was
            results.send((step, None, RuntimeError(f"{type(answer[2]).__name__}: {answer[2]}")))
