"""``ffjobs bench checkpoint``: what an asynchronous checkpoint write costs a Python-bound loop.

The training loop on a GPU is bound by launching ~1700 kernels a step from Python, so a write
that holds the interpreter slows it down even while the GPU waits. This benchmark runs a
"launch loop" on the main thread (``--ops`` tiny in-place torch ops an iteration, each a trip
through Python and the dispatcher) and times its iterations, side by side in one call:

* ``none``: no checkpoint being written;
* ``thread``: a write of the state by a thread of this process (the design before the writer
  process, kept here only to compare against: the same snapshot and
  :meth:`~ffjobs.train.checkpoint.Checkpointer.write`, on a thread);
* ``process``: an asynchronous :meth:`~ffjobs.train.checkpoint.Checkpointer.save` (shared
  host snapshot, writer process).

Each write round alternates ``thread`` and ``process`` (``--rounds`` of each) on a state of
``--state-mb`` MB in ``--tensors`` tensors, written to a temporary directory (``--dir`` to
choose the disk). Reported per variant: mean iteration time while the write is in flight,
its ratio to ``none``, what the loop lost (iterations x the slowdown), the write's own time,
and the training thread's blocked time for the process variant.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any


def make_state(state_mb: int, tensors: int, device: str = "cpu") -> dict[str, Any]:
    """A state dict of ``tensors`` float32 tensors, ``state_mb`` MB in all (random values)."""
    import torch

    per_tensor = max(state_mb * 10**6 // 4 // tensors, 1)
    return {
        "net": {f"layer{i}.weight": torch.randn(per_tensor, device=device) for i in range(tensors)}
    }


def launch_loop(
    ops: int, until: Callable[[], bool], min_iterations: int = 20, device: str = "cpu"
) -> list[float]:
    """Iteration times (s) of ``ops`` tiny torch ops each (kernel launches on a GPU), until
    ``until()`` (at least ``min_iterations``); a GPU is synchronised once an iteration."""
    import torch

    x = torch.zeros(8, device=device)
    times: list[float] = []
    while len(times) < min_iterations or not until():
        started = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return times


def _thread_write(ckpt: Any, step: int, state: dict[str, Any], snapshot: Any) -> dict[str, Any]:
    """Snapshot, then write on a thread of this process: the write before the writer process."""
    started = time.perf_counter()
    payload = snapshot.take({**state, "step": step, "rank_states": [{"rank": 0}]})
    blocked = time.perf_counter() - started
    timing: dict[str, Any] = {"blocked_s": blocked}

    def write() -> None:
        write_started = time.perf_counter()
        ckpt.write(step, payload)
        timing["write_s"] = time.perf_counter() - write_started

    thread = threading.Thread(target=write, name="bench-thread-writer")
    thread.start()
    timing["done"] = lambda: not thread.is_alive()
    timing["join"] = thread.join
    return timing


def _process_write(ckpt: Any, step: int, state: dict[str, Any]) -> dict[str, Any]:
    ckpt.save(step, state, {"rank": 0}, asynchronous=True)
    timing = ckpt.timings[-1]
    return {
        "blocked_s": timing.blocked_s,
        "done": lambda: not ckpt.writing,
        "join": ckpt.wait,
        "timing": timing,
    }


def _summary(times: list[list[float]], base: float | None) -> dict[str, Any]:
    flat = [t for round_times in times for t in round_times]
    mean = statistics.fmean(flat)
    result: dict[str, Any] = {
        "iterations": len(flat),
        "iteration_mean_ms": mean * 1e3,
        "iteration_median_ms": statistics.median(flat) * 1e3,
    }
    if base is not None:
        result["ratio_to_none"] = mean / base
        result["loop_lost_s_per_write"] = (mean - base) * len(flat) / len(times)
    return result


def run_benchmark(
    directory: str, state_mb: int, tensors: int, ops: int, rounds: int, device: str = "cpu"
) -> dict[str, Any]:
    import torch

    from ffjobs.train.checkpoint import Checkpointer
    from ffjobs.train.checkpoint.snapshot import HostSnapshot

    state = make_state(state_mb, tensors, device)
    loop = functools.partial(launch_loop, ops, device=device)
    ckpt = Checkpointer(directory, keep=2)
    thread_snapshot = HostSnapshot()
    try:
        # warm-up, untimed: the writer process starts, both snapshots allocate their buffers
        started = time.perf_counter()
        _process_write(ckpt, 1, state)["join"]()
        first_process_s = time.perf_counter() - started
        _thread_write(ckpt, 2, state, thread_snapshot)["join"]()
        loop(lambda: True, min_iterations=200)

        step = 2
        none, variants = [], {"thread": [], "process": []}
        writes: dict[str, list[dict[str, Any]]] = {"thread": [], "process": []}
        for _ in range(rounds):
            deadline = time.perf_counter() + 1.0
            none.append(loop(lambda d=deadline: time.perf_counter() > d))
            for name in ("thread", "process"):
                step += 1
                if name == "thread":
                    write = _thread_write(ckpt, step, state, thread_snapshot)
                else:
                    write = _process_write(ckpt, step, state)
                variants[name].append(loop(write["done"], min_iterations=1))
                write["join"]()
                if "timing" in write:
                    write["write_s"] = write["timing"].write_s
                writes[name].append(write)
        base = statistics.fmean(t for r in none for t in r)
        result: dict[str, Any] = {
            "benchmark": "checkpoint",
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": f"{os.cpu_count()}-core {platform.machine()}",
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "state_mb": state_mb,
            "tensors": tensors,
            "ops_per_iteration": ops,
            "rounds": rounds,
            "writer_first_save_s": first_process_s,
            "none": _summary(none, None),
        }
        for name, times in variants.items():
            summary = _summary(times, base)
            summary["write_s"] = statistics.median(w["write_s"] for w in writes[name])
            summary["blocked_s"] = statistics.median(w["blocked_s"] for w in writes[name])
            result[name] = summary
        result["process_vs_thread_lost"] = (
            result["process"]["loop_lost_s_per_write"] / result["thread"]["loop_lost_s_per_write"]
            if result["thread"]["loop_lost_s_per_write"] > 0
            else None
        )
        return result
    finally:
        ckpt.close()
        thread_snapshot.release()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-mb", type=int, default=400, help="state size in MB")
    parser.add_argument("--tensors", type=int, default=400, help="tensors in the state")
    parser.add_argument("--ops", type=int, default=200, help="tiny torch ops per iteration")
    parser.add_argument("--rounds", type=int, default=3, help="writes of each variant")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="state + loop")
    parser.add_argument("--dir", help="write checkpoints here (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def handle(args: argparse.Namespace) -> int:
    from ffjobs.cli import print_json

    if args.dir:
        result = run_benchmark(
            args.dir, args.state_mb, args.tensors, args.ops, args.rounds, args.device
        )
    else:
        with tempfile.TemporaryDirectory(prefix="ffjobs-bench-checkpoint-") as tmp:
            result = run_benchmark(
                tmp, args.state_mb, args.tensors, args.ops, args.rounds, args.device
            )
    if args.json:
        print_json(result)
        return 0
    none = result["none"]["iteration_mean_ms"]
    print(f"launch loop, no write: {none:.2f} ms an iteration ({result['machine']})")
    for name in ("thread", "process"):
        r = result[name]
        print(
            f"  during a {name} write of {result['state_mb']} MB ({r['write_s']:.2f} s): "
            f"{r['iteration_mean_ms']:.2f} ms ({r['ratio_to_none']:.2f}x), loop lost "
            f"{r['loop_lost_s_per_write']:.3f} s a write, training blocked {r['blocked_s']:.3f} s"
        )
    return 0


def register(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "checkpoint", help="a Python-bound loop beside a thread vs a writer-process checkpoint"
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ffjobs.bench.checkpoint")
    add_arguments(parser)
    return handle(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
