"""``ffjobs evaluate``: measure a run's model (or a registered one) on held-out identities and
gate it against thresholds and the registry's champion."""

from __future__ import annotations

import argparse

from ffjobs.cli import add_config_arguments, add_json_argument, overrides_from_args, print_json
from ffjobs.errors import UserError

DESCRIPTION = """\
Evaluate a face-swap model on the identities training never saw (data.val_fraction): identity
retrieval top-1 and mean identity cosine, measured by a recogniser other than the training
loss's (evaluate.identity_*), self-swap PSNR and SSIM, and pose error and FID when
evaluate.pose_weights / evaluate.fid_weights name TorchScript networks (skipped otherwise,
nothing is downloaded). The current champion of registry.model_name is evaluated on the same
set with the same recogniser, and the gate (evaluate.gate.*) compares with it. Writes
<run>/evaluate/evaluation.json and samples.png (rows: source, target, fused, champion's).

Exit code: 0 the gate passed, 1 it blocked (the failing checks are printed), 2 bad input,
3 the registry could not be reached to compare.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a run's model on held-out identities and gate it for review",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser)
    add_json_argument(parser)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--run-key",
        metavar="KEY",
        help="evaluate this run's latest verified checkpoint, with the run's own config (plus "
        "any --set); recorded in the run and its MLflow run",
    )
    which.add_argument(
        "--model",
        metavar="URI",
        help="evaluate a registered model, e.g. models:/NAME/3 or models:/NAME@champion, "
        "as a new run of its own (--config and --set choose the data and the gate)",
    )
    parser.set_defaults(handler=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    import sys

    from ffjobs.pipeline import run_pipeline
    from ffjobs.runs.cli import run_single_stage
    from ffjobs.runs.run import resume_run, resumed_config
    from ffjobs.runs.stages import check_plan

    if args.model is not None:
        run, outcome = run_single_stage(args, "evaluate", model_uri=args.model)
    else:
        if args.config is not None:
            raise UserError(
                "--run-key evaluates a run with the config it was trained with; change fields "
                "with --set instead of --config"
            )
        echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
        config = resumed_config(args.run_key, overrides_from_args(args))
        check_plan(config, ("evaluate",))
        from ffjobs.train.checkpoint import latest_step

        run = resume_run(
            args.run_key, config, echo=echo, quiet_stdout=args.json, latest_step=latest_step
        )
        outcome = run_pipeline(config, run, ("evaluate",)).outcomes[-1]
    if args.json:
        print_json({"run_key": run.key, "run_dir": str(run.dir), **outcome.to_dict()})
    else:
        for reason in outcome.facts.get("gate", {}).get("reasons", []):
            print(f"  gate: {reason}")
        print(f"run {run.key}: report {outcome.facts.get('report', '-')}")
    return int(outcome.exit_code)
