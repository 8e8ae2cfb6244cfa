"""A plain reference all-reduce timing loop, independent of the preflight's sweep code.

Each rank allocates the buffer once per size, runs ``warmup`` untimed all-reduces, then times
``iters`` back-to-back all-reduces between two CUDA events (``perf_counter`` on CPU); the
slowest rank's mean counts. busbw = algbw * 2(n-1)/n. The preflight's GPU busbw is compared
with this loop's (``docs/benchmarks.md``).

    python -m ffjobs.bench.allreduce --sizes 1024,8192 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ffjobs.cli import print_json
from ffjobs.local_ranks import free_loopback_port


def _rank_main(
    local_rank: int,
    world: int,
    port: int,
    sizes_mib: list[float],
    warmup: int,
    iters: int,
    out: str,
) -> None:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=local_rank,
        world_size=world,
    )
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    rows = []
    for size in sizes_mib:
        count = int(size * 2**20) // torch.empty((), dtype=dtype).element_size()
        buf = torch.ones(count, dtype=dtype, device=device)
        for _ in range(warmup):
            dist.all_reduce(buf)
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / iters
        else:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            dist.barrier()
            seconds = (time.perf_counter() - t0) / iters
        slowest = torch.tensor(
            [seconds], dtype=torch.float64 if not cuda else torch.float32, device=device
        )
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = float(slowest.item())
        nbytes = count * buf.element_size()
        algbw = nbytes / seconds / 1e9
        busbw = algbw * 2 * (world - 1) / world if world > 1 else algbw
        rows.append(
            {
                "size_bytes": nbytes,
                "iters": iters,
                "time_s": seconds,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
            }
        )
        del buf
        if cuda:
            torch.cuda.empty_cache()
    if local_rank == 0:
        Path(out).write_text(
            json.dumps(
                {
                    "world_size": world,
                    "backend": dist.get_backend(),
                    "dtype": str(dtype).removeprefix("torch."),
                    "results": rows,
                }
            ),
            encoding="utf-8",
        )
    dist.destroy_process_group()


def run_reference(
    sizes_mib: list[float], nproc: int | None = None, warmup: int = 5, iters: int = 20
) -> dict[str, Any]:
    """Spawn ``nproc`` local ranks (default: all GPUs, else 2 CPU ranks) and time each size."""
    import torch
    import torch.multiprocessing as mp

    world = nproc or (torch.cuda.device_count() if torch.cuda.is_available() else 2)
    port = free_loopback_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        started = time.perf_counter()
        mp.spawn(_rank_main, args=(world, port, sizes_mib, warmup, iters, out), nprocs=world)
        result = json.loads(Path(out).read_text(encoding="utf-8"))
    result["elapsed_s"] = round(time.perf_counter() - started, 2)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        default="1024,8192",
        metavar="MIB,...",
        help="message sizes in MiB, comma-separated (default: 1024,8192)",
    )
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: GPUs, or 2)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def handle(args: argparse.Namespace) -> int:
    from ffjobs.errors import UserError

    try:
        sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise UserError(
            f"--sizes: expected MiB numbers like 1024,8192, got {args.sizes!r}"
        ) from None
    if not sizes or any(s <= 0 for s in sizes) or args.iters < 1 or args.warmup < 0:
        raise UserError("--sizes must be > 0, --iters >= 1 and --warmup >= 0")
    result = run_reference(sizes, args.nproc, args.warmup, args.iters)
    if args.json:
        print_json(result)
    else:
        for row in result["results"]:
            print(
                f"{row['size_bytes'] / 2**20:>9g} MiB  busbw {row['busbw_gbps']:8.2f} GB/s  "
                f"({row['iters']} iters, {result['world_size']} ranks, {result['dtype']})"
            )
    return 0


def register(actions: argparse._SubParsersAction) -> None:
    """``ffjobs bench allreduce``."""
    parser = actions.add_parser(
        "allreduce", help="reference all-reduce busbw (CUDA events), to check the preflight against"
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ffjobs.bench.allreduce", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    from ffjobs.errors import UserError

    try:
        return handle(parser.parse_args(argv))
    except UserError as exc:
        print(f"ffjobs: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
