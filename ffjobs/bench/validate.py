"""``ffjobs bench validate``: validation throughput against the raw decode rate, and re-validation.

On one synthetic JPEG dataset, in one run, round by round (so drift on a shared machine hits
every measurement alike), it times:

* raw decode: one process, ``PIL.Image.open(path).load()`` over every file;
* parallel raw decode: the same loop split over one process per worker: what the cores
  deliver right now, the "2-core decode limit" the first pass is held against;
* first pass: ``validate_dataset`` with an empty cache, on every core: every file read and
  content-hashed, every JPEG's entropy-coded data decoded in full (libjpeg-turbo, DCT-scaled
  to its 8x8 block means: the IDCT of the full-size image is the one thing skipped, and it
  cannot fail), perceptual hashes, duplicate search and the report;
* re-validation: the same dataset again with the cache from the first pass;
* one changed file: re-validation after rewriting one image (only it is inspected).

Medians of per-round ratios give ``first_pass_vs_raw_decode`` (goal >= 1.7 on 2 cores),
``first_pass_vs_parallel_raw_decode`` (how close validation comes to the decode limit) and
``revalidation_speedup`` (goal >= 20). Wall-clock ratios move with whatever else the machine
runs, so CPU seconds are reported too (this process plus its workers):
``first_pass_cpu_vs_raw_decode_cpu`` is how much more work validation does per file than the
raw decode, independent of load.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIRST_PASS_GOAL = 1.7
REVALIDATION_GOAL = 20.0


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the validation workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def raw_decode_seconds(files: list[Path]) -> float:
    """Single-process decode of every file: the baseline a validator is compared with."""
    from PIL import Image

    started = time.perf_counter()
    for path in files:
        with Image.open(path) as image:
            image.load()
    return time.perf_counter() - started


def _decode_all(files: list[Path]) -> None:
    from PIL import Image

    for path in files:
        with Image.open(path) as image:
            image.load()


def parallel_raw_decode_seconds(files: list[Path], workers: int) -> float:
    """The raw loop split over ``workers`` forked processes, pool start included (as validation's)."""
    import multiprocessing

    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_decode_all, [files[i::workers] for i in range(workers)])
    return time.perf_counter() - started


def run_benchmark(
    workdir: Path, identities: int, per_identity: int, size: int, rounds: int, workers: int
) -> dict[str, Any]:
    """Generate the dataset under ``workdir`` and measure; returns the JSON-ready result."""
    # Imported here: the CLI registers this command without loading PIL or numpy.
    from ffjobs.config.data import ValidationConfig
    from ffjobs.data.synth import generate_dataset
    from ffjobs.data.validate import validate_dataset

    root = generate_dataset(
        workdir / "faces", identities=identities, per_identity=per_identity, size=size, seed=0
    )
    files = sorted(root.glob("*/*.jpg"))
    for path in files:  # warm the page cache: both sides then read from memory
        path.read_bytes()
    raw, parallel, first, again, changed = [], [], [], [], []
    worker_count = workers or len(os.sched_getaffinity(0))
    raw_cpu, first_cpu = [], []
    for round_index in range(rounds):
        cache = workdir / f"cache-{round_index}"
        config = ValidationConfig(cache_dir=str(cache), workers=workers)
        cpu = cpu_seconds()
        raw.append(raw_decode_seconds(files))
        raw_cpu.append(cpu_seconds() - cpu)
        parallel.append(parallel_raw_decode_seconds(files, worker_count))
        cpu = cpu_seconds()
        report = validate_dataset(root, config)  # joins its pool: workers' CPU is counted
        first_cpu.append(cpu_seconds() - cpu)
        first.append(report.timing["total_s"])
        repeat = validate_dataset(root, config)
        assert repeat.timing["inspected"] == 0
        again.append(repeat.timing["total_s"])
        victim = files[round_index]
        victim.write_bytes(victim.read_bytes())  # same bytes, new mtime: must be re-inspected
        one = validate_dataset(root, config)
        assert one.timing["inspected"] == 1
        changed.append(one.timing["total_s"])
        shutil.rmtree(cache, ignore_errors=True)
    raw_s, first_s = statistics.median(raw), statistics.median(first)
    again_s, changed_s = statistics.median(again), statistics.median(changed)
    result = {
        "files": len(files),
        "image_size": size,
        "dataset_mib": round(sum(p.stat().st_size for p in files) / 2**20, 1),
        "cpus": len(os.sched_getaffinity(0)),
        "workers": worker_count,
        "rounds": rounds,
        "raw_decode_s": round(raw_s, 4),
        "raw_decode_files_per_s": round(len(files) / raw_s, 1),
        "parallel_raw_decode_files_per_s": round(len(files) / statistics.median(parallel), 1),
        "parallel_raw_vs_raw_decode": round(
            statistics.median(r / p for r, p in zip(raw, parallel, strict=True)), 3
        ),
        "first_pass_vs_parallel_raw_decode": round(
            statistics.median(p / f for p, f in zip(parallel, first, strict=True)), 3
        ),
        "first_pass_s": round(first_s, 4),
        "first_pass_files_per_s": round(len(files) / first_s, 1),
        "revalidation_s": round(again_s, 4),
        "one_changed_file_s": round(changed_s, 4),
        # Paired per round (raw, then validation, back to back): this machine's speed drifts
        # between rounds on shared hosts, and a ratio of medians would mix rounds.
        "first_pass_vs_raw_decode": round(
            statistics.median(r / f for r, f in zip(raw, first, strict=True)), 3
        ),
        "raw_decode_cpu_s": round(statistics.median(raw_cpu), 4),
        "first_pass_cpu_s": round(statistics.median(first_cpu), 4),
        "first_pass_cpu_vs_raw_decode_cpu": round(
            statistics.median(first_cpu) / statistics.median(raw_cpu), 3
        ),
        "revalidation_speedup": round(first_s / again_s, 1),
        "goals": {
            "first_pass_vs_raw_decode": FIRST_PASS_GOAL,
            "revalidation_speedup": REVALIDATION_GOAL,
        },
        "rounds_s": {
            "raw": raw,
            "parallel_raw": parallel,
            "first_pass": first,
            "raw_cpu": raw_cpu,
            "first_pass_cpu": first_cpu,
            "revalidation": again,
            "one_changed": changed,
        },
    }
    result["goals_met"] = (
        result["first_pass_vs_raw_decode"] >= FIRST_PASS_GOAL
        and result["revalidation_speedup"] >= REVALIDATION_GOAL
    )
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--identities", type=int, default=250)
    parser.add_argument("--per-identity", type=int, default=12)
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--workers", type=int, default=0, help="0: one per usable core")
    parser.add_argument("--workdir", help="keep the dataset here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def handle(args: argparse.Namespace) -> int:
    from ffjobs.cli import print_json

    if args.workdir:
        result = run_benchmark(
            Path(args.workdir),
            args.identities,
            args.per_identity,
            args.size,
            args.rounds,
            args.workers,
        )
    else:
        with tempfile.TemporaryDirectory(prefix="ffjobs-bench-validate-") as tmp:
            result = run_benchmark(
                Path(tmp),
                args.identities,
                args.per_identity,
                args.size,
                args.rounds,
                args.workers,
            )
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['files']} JPEGs {result['image_size']} px on {result['cpus']} cpus: "
            f"raw decode {result['raw_decode_files_per_s']:.0f}/s, first pass "
            f"{result['first_pass_files_per_s']:.0f}/s "
            f"({result['first_pass_vs_raw_decode']:.2f}x, goal {FIRST_PASS_GOAL}x; "
            f"{result['first_pass_cpu_vs_raw_decode_cpu']:.2f}x the raw decode's CPU), "
            f"re-validation {result['revalidation_s'] * 1000:.0f} ms "
            f"({result['revalidation_speedup']:.0f}x faster, goal {REVALIDATION_GOAL:.0f}x)"
        )
    return 0


def register(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "validate", help="dataset validation throughput vs raw decode, and re-validation"
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ffjobs.bench.validate")
    add_arguments(parser)
    return handle(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
