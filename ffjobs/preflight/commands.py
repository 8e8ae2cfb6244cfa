"""``ffjobs preflight``: probe the nodes, sweep all-reduce bandwidth, check transports, gate."""

from __future__ import annotations

import argparse
from typing import Any

from ffjobs.cli import add_nproc_argument
from ffjobs.runs.cli import add_run_arguments, run_single_stage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    add_nproc_argument(parser)
    parser.add_argument(
        "--local",
        action="store_true",
        help="run the ranks as processes on this machine (NCCL on its GPUs, "
        "else gloo on CPU) instead of a SLURM job",
    )
    parser.add_argument(
        "--sysfs-root",
        default=None,
        metavar="PATH",
        help="read network/InfiniBand sysfs from PATH instead of /sys (testing)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "preflight",
        help="check the GPU fabric (NCCL/IB) before training",
        description="Probe each node, check the NCCL environment, sweep all-reduce bandwidth, "
        "check the transports NCCL chose against the cluster profile, and print "
        "PASS, WARN or FAIL. Exit code: 0 PASS/WARN, 1 FAIL, 2 bad input.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from ffjobs.cli import config_from_args, print_json

    if args.local:
        args.overrides.append("slurm.executor=local")
    config = config_from_args(args)
    run, outcome = run_single_stage(args, "preflight", config=config, sysfs_root=args.sysfs_root)
    if outcome.status == "skipped":
        return int(outcome.exit_code)
    report = json.loads(Path(outcome.facts["report"]).read_text())
    if args.json:
        print_json({**report, "run_key": run.key})
    else:
        print(human_summary(report))
    return int(outcome.exit_code)


def human_summary(report: dict[str, Any]) -> str:
    lines = [
        f"preflight {report['verdict']}: {report['world_size']} ranks on "
        f"{len(report['nodes'])} node(s), {report['backend']}, {report['elapsed_s']} s"
    ]
    lines += [f"  {reason}" for reason in report["reasons"]]
    if report["suspect_nodes"]:
        lines.append(f"  suspect nodes: {', '.join(report['suspect_nodes'])}")
    for row in report["sweep"]:
        lines.append(
            f"  {row['size_bytes'] / 2**20:>9g} MiB  busbw {row['busbw_gbps']:8.2f} GB/s"
            f"  ({row['iters']} iters)"
        )
    lines.append(f"  report: {report['artifacts']['markdown']}")
    return "\n".join(lines)
