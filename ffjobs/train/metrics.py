"""Throughput, step-time split and MFU.

How the step time is split (per optimizer step, averaged over a logging window):

* **data wait**: host time blocked waiting for the next batch from the loader;
* **exposed communication**: time between the moment the *last* gradient bucket became ready
  (its all-reduce was launched by the DDP comm hook, so all gradient compute is done) and the
  moment ``backward()`` can hand gradients to the optimizer (DDP has waited for every bucket's
  all-reduce and copied the results back). All-reduce that overlapped with backward compute
  is *not* counted; only the tail the optimizer step waits for is. On CUDA both moments are
  CUDA events on the compute stream (so GPU time, not host launch time); on CPU host clocks.
  Summed over the discriminator's and the generator's backward passes.
* **compute**: the rest of the step (forward, backward, optimizer, EMA, host overhead).

The window's wall time is taken after a device synchronisation, so images/s is exact over the
window even though single steps are not synchronised.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


class CommTimer:
    """A DDP comm hook (plain all-reduce) that also measures the exposed all-reduce tail."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._last_ready: Any = None
        self._pending: list[tuple[Any, Any]] = []
        self._host_exposed = 0.0

    def hook(self, state, bucket):  # no annotations: DDP checks them and ours are strings
        """Comm hook: mark the moment this bucket is ready, then all-reduce it as DDP would."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._last_ready = event
        else:
            self._last_ready = time.perf_counter()
        return allreduce_hook(state, bucket)

    @contextmanager
    def backward(self) -> Iterator[None]:
        """Wrap one ``loss.backward()`` of a DDP module whose hook is :meth:`hook`."""
        self._last_ready = None
        yield
        if self._last_ready is None:  # no all-reduce in this backward (no_sync or one rank)
            return
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pending.append((self._last_ready, end))
        else:
            self._host_exposed += time.perf_counter() - self._last_ready
        self._last_ready = None

    def collect_seconds(self) -> float:
        """Exposed communication since the last call, in seconds (needs a synchronised device)."""
        total = self._host_exposed + sum(s.elapsed_time(e) for s, e in self._pending) / 1000.0
        self._host_exposed, self._pending = 0.0, []
        return total


@dataclass
class WindowStats:
    """Averages over one logging window."""

    steps: int
    images: int
    seconds: float
    data_wait_s: float
    exposed_comm_s: float

    @property
    def step_time_s(self) -> float:
        return self.seconds / max(self.steps, 1)

    def as_dict(self, world_size: int, flops_per_image: float | None, peak_flops: float) -> dict:
        step = self.step_time_s
        per_step_data = self.data_wait_s / max(self.steps, 1)
        per_step_comm = self.exposed_comm_s / max(self.steps, 1)
        images_per_s = self.images / self.seconds if self.seconds > 0 else 0.0
        per_gpu = images_per_s / world_size
        out = {
            "images_per_s": images_per_s,
            "images_per_s_per_gpu": per_gpu,
            "step_time_s": step,
            "data_wait_s": per_step_data,
            "exposed_comm_s": per_step_comm,
            "compute_s": max(step - per_step_data - per_step_comm, 0.0),
            "exposed_comm_fraction": per_step_comm / step if step > 0 else 0.0,
            "data_wait_fraction": per_step_data / step if step > 0 else 0.0,
        }
        if flops_per_image:
            out["mfu"] = flops_per_image * per_gpu / peak_flops
        return out


class ThroughputMeter:
    """Accumulates step timings; :meth:`window` closes the current window."""

    def __init__(self, device: torch.device, comm: CommTimer):
        self.device = device
        self.comm = comm
        self.reset()

    def reset(self) -> None:
        synchronize(self.device)
        self.comm.collect_seconds()
        self._start = time.perf_counter()
        self._steps = self._images = 0
        self._data_wait = 0.0

    @contextmanager
    def data_wait(self) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self._data_wait += time.perf_counter() - start

    @contextmanager
    def excluded(self) -> Iterator[None]:
        """Time spent inside (checkpointing) does not count towards the window."""
        start = time.perf_counter()
        yield
        self._start += time.perf_counter() - start

    def step_done(self, global_images: int) -> None:
        self._steps += 1
        self._images += global_images

    def window(self) -> WindowStats:
        synchronize(self.device)
        stats = WindowStats(
            steps=self._steps,
            images=self._images,
            seconds=time.perf_counter() - self._start,
            data_wait_s=self._data_wait,
            exposed_comm_s=self.comm.collect_seconds(),
        )
        self._start = time.perf_counter()
        self._steps = self._images = 0
        self._data_wait = 0.0
        return stats


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def format_progress(step: int, total: int, metrics: dict[str, float], width: int = 20) -> str:
    """One console line: a bar, throughput, step split and losses."""
    done = int(width * step / max(total, 1))
    bar = "#" * done + "." * (width - done)
    parts = [f"step {step}/{total} [{bar}]"]
    if "images_per_s" in metrics:
        parts.append(
            f"{metrics['images_per_s']:.1f} img/s ({metrics['images_per_s_per_gpu']:.1f}/gpu)"
        )
        parts.append(
            f"step {metrics['step_time_s'] * 1000:.0f} ms (data {metrics['data_wait_s'] * 1000:.0f}"
            f", comm {metrics['exposed_comm_s'] * 1000:.0f})"
        )
    if "mfu" in metrics:
        parts.append(f"MFU {metrics['mfu'] * 100:.1f}%")
    losses = [f"{k[5:]} {v:.3f}" for k, v in metrics.items() if k.startswith("loss/")]
    if losses:
        parts.append(" ".join(losses))
    return " | ".join(parts)
