"""Where a training step's time goes: a few steps under ``torch.profiler``, written to a folder.

``profile_steps(trainer, steps, out_dir)`` runs ``steps`` more training steps (after the
benchmark's warm-up, so compilation and autotuning are done) with CPU and CUDA activity
recorded, and writes:

* ``kernels.txt``: the operator/kernel table sorted by self device time (the profile to read
  first), and ``ranges.txt``: the trainer's named phases (``record_function``) by device time;
* ``kernels.json``: the same rows as data (name, calls, self device and host microseconds);
* ``trace.json.gz``: the timeline, for Perfetto or ``chrome://tracing``;
* ``compile-times.txt``: where ``torch.compile`` spent its start-up time in this process.

It returns a summary for the report: profiled wall time per step, the device's busy share
(kernel time over wall time: well under 1 means the host or the input pipeline keeps the GPU
waiting) and the share of kernel time by kind (convolution/matmul, compiled Triton kernels,
other elementwise and normalisation kernels, copies).
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path
from typing import Any

KERNEL_KINDS = (
    # (kind, name fragments); the first kind whose fragment is in a kernel's name wins
    ("triton", ("triton_",)),
    ("conv_matmul", ("conv", "gemm", "cutlass", "sm90_", "xmma", "wgrad", "dgrad", "cudnn")),
    ("copy", ("memcpy", "memset", "direct_copy", "bfloat16_copy")),
    ("optimizer", ("adam", "foreach", "lerp", "multi_tensor")),
)


def kernel_kind(name: str) -> str:
    """Coarse kind of a CUDA kernel from its name (see ``KERNEL_KINDS``); ``other`` else."""
    lowered = name.lower()
    for kind, fragments in KERNEL_KINDS:
        if any(fragment in lowered for fragment in fragments):
            return kind
    return "other"


def _self_device_us(event: Any) -> float:
    value = getattr(event, "self_device_time_total", None)
    return float(value if value is not None else event.self_cuda_time_total)


def profile_steps(trainer: Any, steps: int, out_dir: str | Path) -> dict[str, Any]:
    """Profile ``steps`` training steps of ``trainer``; write the tables and trace to ``out_dir``."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    list(trainer.run_steps(1))  # the profiler's own start-up stays out of the profiled steps
    with profile(activities=activities, record_shapes=False) as prof:
        started = time.perf_counter()
        list(trainer.run_steps(steps))
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        wall = time.perf_counter() - started
    averages = prof.key_averages()
    rows = sorted(
        (
            {
                "name": e.key,
                "calls": e.count,
                "self_device_us": _self_device_us(e),
                "self_host_us": float(e.self_cpu_time_total),
                "device_us": float(getattr(e, "device_time_total", 0.0) or 0.0),
                "is_range": e.key.startswith("ffjobs."),
                "is_kernel": e.device_type != DeviceType.CPU,
            }
            for e in averages
        ),
        key=lambda r: r["self_device_us"],
        reverse=True,
    )
    (out / "kernels.json").write_text(json.dumps(rows, indent=1))
    sort_key = "self_cuda_time_total" if trainer.device.type == "cuda" else "self_cpu_time_total"
    (out / "kernels.txt").write_text(averages.table(sort_by=sort_key, row_limit=80))
    ranges = sorted((r for r in rows if r["is_range"]), key=lambda r: r["name"])
    (out / "ranges.txt").write_text(
        "".join(
            f"{r['name']:<32} {'device span' if r['is_kernel'] else 'host':<11} "
            f"{r['calls']:>5} calls  kernels {r['device_us'] / 1000 / steps:8.2f} ms/step  "
            f"span {r['self_device_us'] / 1000 / steps:8.2f} ms/step  "
            f"host {r['self_host_us'] / 1000 / steps:8.2f} ms/step\n"
            for r in ranges
        )
    )
    try:  # what start-up spent compiling (a private API: best effort)
        from torch._dynamo.utils import compile_times

        (out / "compile-times.txt").write_text(compile_times(repr="str", aggregate=True))
    except Exception as exc:  # noqa: BLE001
        (out / "compile-times.txt").write_text(f"not available: {exc}\n")
    trace = out / "trace.json"
    prof.export_chrome_trace(str(trace))
    with trace.open("rb") as raw, gzip.open(out / "trace.json.gz", "wb") as packed:
        shutil.copyfileobj(raw, packed)
    trace.unlink()

    kernel_rows = [r for r in rows if r["is_kernel"] and not r["is_range"]]
    kernel_us = sum(r["self_device_us"] for r in kernel_rows)
    by_kind: dict[str, float] = {}
    for r in kernel_rows:
        kind = kernel_kind(r["name"])
        by_kind[kind] = by_kind.get(kind, 0.0) + r["self_device_us"]
    return {
        "profile_steps": steps,
        "profile_step_s": wall / steps,
        "profile_device_busy_fraction": kernel_us / 1e6 / wall if wall > 0 else None,
        "profile_kernel_share": {k: v / kernel_us for k, v in by_kind.items()} if kernel_us else {},
        "profile_dir": str(out),
    }
