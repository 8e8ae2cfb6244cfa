"""``ffjobs bench ...``: each benchmark lives in its own module and registers itself here."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="measure throughput, scaling and the fabric")
    actions = bench.add_subparsers(dest="bench_command", metavar="BENCH", required=True)

    from ffjobs.bench import train

    train.register(actions)

    from ffjobs.bench import allreduce

    allreduce.register(actions)

    from ffjobs.bench import validate

    validate.register(actions)

    from ffjobs.bench import recovery

    recovery.register(actions)

    from ffjobs.bench import checkpoint

    checkpoint.register(actions)

    from ffjobs.bench import numerics

    numerics.register(actions)

    from ffjobs.bench import quality

    quality.register(actions)
