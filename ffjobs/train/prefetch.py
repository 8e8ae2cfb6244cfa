"""Copy the next micro-batches to the GPU while the current step computes.

On CUDA, :class:`DevicePrefetcher` keeps ``depth`` batches in flight: each is taken from the
loader (pinned host memory) and copied on a side stream with ``non_blocking=True``, so the
copy overlaps the step before it. Handing a batch to the step makes the compute stream wait
for that batch's copy (an event: a GPU-side wait, the host does not block) and marks the tensors as used there
(``record_stream``) so the caching allocator does not reuse their memory while the step
still reads them. On CPU there is no copy and no stream; batches pass through unchanged.

Exact resume: batches in flight have been taken from the :class:`~ffjobs.train.data.BatchStream`
but not consumed by training, so :meth:`DevicePrefetcher.state_dict` is the stream's state
from before the oldest batch in flight, i.e. the position after the last *consumed* batch.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from ffjobs.train.data import BatchStream
from ffjobs.train.tensors import map_tensors


class DevicePrefetcher:
    """Micro-batches of a :class:`BatchStream`, already on ``device``; same checkpoint state."""

    def __init__(self, stream: BatchStream, device: torch.device, depth: int = 1):
        if depth < 1:
            raise ValueError(f"depth: must be >= 1, got {depth}")
        self.stream = stream
        self.device = device
        self.depth = depth
        self.copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        # (stream state before the batch was taken, the batch, its copy-done event) per batch
        self._in_flight: deque[tuple[dict[str, Any], Any, Any]] = deque()

    def _take(self) -> None:
        state = self.stream.state_dict()
        batch = self.stream.next()
        copied = None
        if self.copy_stream is not None:
            with torch.cuda.stream(self.copy_stream):
                batch = map_tensors(batch, lambda t: t.to(self.device, non_blocking=True))
                copied = torch.cuda.Event()
                copied.record(self.copy_stream)
        self._in_flight.append((state, batch, copied))

    def next(self) -> Any:
        """The next micro-batch (tensors on ``device``); starts copying the ones after it.

        Host time spent here is what the step waits for: the loader (when it is behind) and
        issuing the copies. Waiting for a copy still running happens on the GPU.
        """
        while len(self._in_flight) < self.depth:
            self._take()
        _, batch, copied = self._in_flight.popleft()
        if copied is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(copied)  # this batch's copy only, not the ones issued after it
            # memory allocated on the copy stream, read on the compute stream: keep it alive
            map_tensors(batch, lambda t: t.record_stream(compute))
        self._take()
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The stream's state after the last consumed batch (what a checkpoint must hold)."""
        if self._in_flight:
            return dict(self._in_flight[0][0])
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Drop the batches in flight and continue from ``state``."""
        self._in_flight.clear()
        self.stream.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """Drop the batches in flight and continue at the start of ``epoch``."""
        if self._in_flight:  # rewind the stream to the last consumed batch first
            self.load_state_dict(self.state_dict())
        self.stream.set_epoch(epoch)
