"""All-reduce bandwidth sweep through torch.distributed (NCCL on GPU, gloo on CPU).

Timing follows nccl-tests: the buffer is allocated and warmed up outside the timed region,
then ``iters`` back-to-back all-reduces are timed as one block (CUDA events on GPU,
``perf_counter`` between barriers on CPU); the slowest rank's time counts.
busbw = algbw * 2(n-1)/n, the bandwidth each link must carry in a ring all-reduce.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

MIB = 2**20


@dataclass
class SizeResult:
    size_bytes: int
    iters: int
    time_s: float
    """Mean time of one all-reduce on the slowest rank."""
    algbw_gbps: float
    busbw_gbps: float

    def to_dict(self) -> dict:
        return asdict(self)


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: ``algbw * 2(n-1)/n`` (``algbw`` for n=1)."""
    if world_size <= 1:
        return algbw
    return algbw * 2 * (world_size - 1) / world_size


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _max_over_group(value: float, device: torch.device, group=None) -> float:
    """The largest ``value`` across the group (one tiny all-reduce, outside any timed region)."""
    tensor = torch.tensor(
        [value], dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device
    )
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return float(tensor.item())


def timed_allreduce(tensor: torch.Tensor, iters: int, group=None) -> float:
    """Seconds per all-reduce, averaged over ``iters`` back-to-back calls on this rank."""
    if tensor.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(tensor, group=group)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / iters
    dist.barrier(group=group)
    began = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    dist.barrier(group=group)
    return (time.perf_counter() - began) / iters


def measure_size(
    size_bytes: int,
    dtype: torch.dtype,
    device: torch.device,
    *,
    warmup: int,
    min_iters: int,
    max_iters: int,
    target_time_s: float,
    group=None,
    group_size: int | None = None,
) -> SizeResult:
    """Time all-reduces of one message size; the iteration count adapts to ``target_time_s``."""
    element = torch.empty((), dtype=dtype).element_size()
    tensor = torch.ones(max(1, size_bytes // element), dtype=dtype, device=device)
    size_bytes = tensor.numel() * element
    # One timed warm-up call sizes the run; every rank must agree on the count, so take the max.
    _synchronize(device)
    began = time.perf_counter()
    dist.all_reduce(tensor, group=group)
    _synchronize(device)
    first = time.perf_counter() - began
    if warmup > 1:
        first = min(first, timed_allreduce(tensor, warmup - 1, group))
    estimate = _max_over_group(first, device, group)
    iters = int(min(max_iters, max(min_iters, math.ceil(target_time_s / max(estimate, 1e-6)))))
    seconds = _max_over_group(timed_allreduce(tensor, iters, group), device, group)
    del tensor
    world = group_size if group_size is not None else dist.get_world_size(group)
    algbw = size_bytes / seconds / 1e9
    return SizeResult(size_bytes, iters, seconds, algbw, bus_bandwidth(algbw, world))


def sweep(
    sizes_mib: list[float],
    dtype: torch.dtype,
    device: torch.device,
    *,
    warmup: int,
    min_iters: int,
    max_iters: int,
    target_time_s: float,
    group=None,
    group_size: int | None = None,
) -> list[SizeResult]:
    """Measure every size in ``sizes_mib`` (ascending), over ``group`` (default: the world)."""
    results = []
    for size in sorted(sizes_mib):
        results.append(
            measure_size(
                int(size * MIB),
                dtype,
                device,
                warmup=warmup,
                min_iters=min_iters,
                max_iters=max_iters,
                target_time_s=target_time_s,
                group=group,
                group_size=group_size,
            )
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the 8 GiB buffer should not crowd the next size
    return results
