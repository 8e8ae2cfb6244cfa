"""``ffjobs run``: the whole pipeline in one command (validate -> ... -> register).

Every ``ffjobs run`` is a new run with its own key, run directory, checkpoint folder and MLflow
run; ``--resume RUN_KEY`` continues one. The stages are the same functions the single-stage
commands and the Airflow tasks call (:mod:`ffjobs.runs.stages`); this module only chains them,
stops at the first stage that says no, and prints where everything went.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ffjobs.cli import (
    add_config_arguments,
    add_json_argument,
    add_nproc_argument,
    config_from_args,
    overrides_from_args,
    print_json,
)
from ffjobs.config import Config
from ffjobs.errors import UserError
from ffjobs.runs.run import Run, create_run, finish_run, link, resume_run, resumed_config
from ffjobs.runs.stages import STAGES, check_plan, parse_stages, run_stage
from ffjobs.tracking.redact import redact_text


def run_pipeline(config: Config, run: Run, stages: Sequence[str] = tuple(STAGES)) -> Run:
    """Run ``stages`` in order into ``run``; stop at the first one that fails or is blocked (the
    evaluation gate decided against the model: the run still finishes); end the run."""
    status = "FINISHED"
    try:
        for name in stages:
            outcome = run_stage(config, run, name)
            if outcome.status == "failed":
                status = "FAILED"
                break
            if outcome.status == "blocked":
                break
    except BaseException:
        status = "FAILED"
        raise
    finally:
        finish_run(run, status)
    return run


def summary_dict(run: Run) -> dict[str, Any]:
    """What ``ffjobs run --json`` prints: the outcome of this pass, and where things are."""
    failed = [o for o in run.outcomes if o.status in ("failed", "blocked")]
    return {
        "run_key": run.key,
        "passed": not failed,
        "exit_code": int(failed[0].exit_code) if failed else 0,
        "run_dir": str(run.dir),
        "checkpoint_dir": run.checkpoint_dir,
        "mlflow_run_id": run.mlflow_run_id,
        "mlflow": link(run),
        "tracking_uri": (
            redact_text(run.config.tracking.tracking_uri) if run.config.tracking.enabled else None
        ),
        "stages": [o.to_dict() for o in run.outcomes],
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the whole pipeline, validate to register (a new run each time)",
        description="Chain the stages on this machine (default: the embedded local profile, "
        "CPU, synthetic data). Each invocation is a new run with its own key, run directory, "
        "checkpoints and MLflow run; --resume RUN_KEY continues one. Stops at the first stage "
        "that fails; a model that passes evaluation is registered as the challenger for review.",
    )
    add_config_arguments(parser)
    add_json_argument(parser)
    add_nproc_argument(parser)
    parser.add_argument(
        "--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--resume",
        metavar="RUN_KEY",
        help="continue this run: its config, checkpoints and MLflow run; --set changes a "
        "field that can take effect on a resumed run, and refuses one that cannot",
    )
    which.add_argument(
        "--run-key", metavar="KEY", help="key of the new run (default: <name>-<stamp>-<random>)"
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    stages = parse_stages(args.stages)
    echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
    if args.resume:
        if args.config is not None:
            raise UserError(
                "--resume continues a run with the config it was started with; "
                "change fields with --set instead of --config"
            )
        config = resumed_config(args.resume, overrides_from_args(args))
        check_plan(config, stages)
        from ffjobs.train.checkpoint import latest_step

        run = resume_run(
            args.resume, config, echo=echo, quiet_stdout=args.json, latest_step=latest_step
        )
    else:
        config = config_from_args(args)
        check_plan(config, stages)
        run = create_run(config, key=args.run_key, echo=echo, quiet_stdout=args.json)
    echo(f"run {run.key}: {run.dir}")
    run_pipeline(config, run, stages)
    summary = summary_dict(run)
    if args.json:
        print_json(summary)
    else:
        blocked = any(o.status == "blocked" for o in run.outcomes)
        verdict = (
            "passed"
            if summary["passed"]
            else "blocked by the evaluation gate"
            if blocked
            else "FAILED"
        )
        where = f"; MLflow {summary['mlflow']}" if summary["mlflow"] else ""
        print(f"pipeline {verdict}: run {run.key}, outputs in {run.dir}{where}")
        registered = next(
            (o for o in run.outcomes if o.name == "register" and o.facts.get("version")), None
        )
        if registered is not None:
            from ffjobs.registry.stage import review_hint

            print("\n".join(review_hint(registered.facts, config)))
    return summary["exit_code"]
