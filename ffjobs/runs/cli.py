"""What every single-stage command shares: a new run, its stage, one line per outcome."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args
from ffjobs.config import Config
from ffjobs.runs.run import Run, StageOutcome, create_run, finish_run
from ffjobs.runs.stages import check_plan, run_stage


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--set``, ``--json`` and ``--run-key``."""
    add_config_arguments(parser)
    add_json_argument(parser)
    parser.add_argument(
        "--run-key", metavar="KEY", help="key of the new run (default: <name>-<stamp>-<random>)"
    )


def run_single_stage(
    args: argparse.Namespace,
    stage: str,
    *,
    config: Config | None = None,
    **options: Any,
) -> tuple[Run, StageOutcome]:
    """Start a new run for one stage, run it through the stage contract, end the run.

    ``options`` go to the stage function (e.g. ``data="memory"`` for training).
    """
    config = config if config is not None else config_from_args(args)
    check_plan(config, (stage,))
    echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
    run = create_run(config, key=args.run_key, echo=echo, quiet_stdout=args.json)
    status = "FAILED"
    try:
        outcome = run_stage(config, run, stage, **options)
        status = "FAILED" if outcome.status == "failed" else "FINISHED"
    finally:
        finish_run(run, status)
    return run, outcome
