"""``ffjobs train``: train locally on N ranks (gloo on CPU, NCCL on GPUs), resuming by default."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.config import Config
from ffjobs.errors import ExitCode, UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train",
        help="train the face-fusion model (DDP; resumes from the newest verified checkpoint)",
        description="Train locally: --nproc N starts N ranks on this machine with a loopback "
        "rendezvous (gloo on CPU, NCCL on GPUs). Under srun/torchrun each task is one rank.",
    )
    add_config_arguments(train)
    add_json_argument(train)
    train.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="ranks to start on this machine (default 1)",
    )
    train.add_argument(
        "--data",
        choices=("dataset", "memory"),
        default="dataset",
        help="dataset: data.source (synthetic one generated if missing); "
        "memory: random tensors, no image decoding",
    )
    train.set_defaults(handler=_train)


def ensure_dataset(config: Config) -> None:
    """Generate the synthetic dataset when ``data.source`` is the default path and missing,
    and pre-train the identity encoder into ``model.identity_weights`` if that file is missing."""
    from ffjobs.models.prepare import ensure_identity_dataset, ensure_identity_weights

    if not config.data.source.startswith("s3://"):
        ensure_identity_dataset(config)
    if config.model.identity_weights and not Path(config.model.identity_weights).exists():
        print(
            f"pre-training the identity encoder into {config.model.identity_weights}",
            file=sys.stderr,
        )
        ensure_identity_weights(config)


def _train(args: argparse.Namespace) -> int:
    from ffjobs.train.launch import LaunchFailed, launch_local

    if args.nproc < 1:
        raise UserError(f"--nproc: must be >= 1, got {args.nproc}")
    config = config_from_args(args)
    if args.data == "dataset":
        ensure_dataset(config)
    if args.json:
        config.train.progress = False
    try:
        if args.nproc == 1:
            from ffjobs.train.worker import run_rank

            quiet = (
                contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
            )
            with quiet:
                result = run_rank(config, "train", args.data)
        else:
            result = launch_local(config, args.nproc, data=args.data, quiet_stdout=args.json)
    except LaunchFailed as exc:
        print(f"ffjobs: training failed: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    if args.json:
        print_json(result)
    else:
        last = result.get("history", [{}])[-1] if result.get("history") else {}
        print(
            f"trained steps {result.get('start_step')} -> {result.get('final_step')} on "
            f"{result.get('world_size')} rank(s); last checkpoint: {result.get('last_checkpoint')}"
        )
        if "images_per_s" in last:
            print(
                f"last window: {last['images_per_s']:.1f} img/s, "
                f"exposed comm {last['exposed_comm_fraction'] * 100:.1f}% of step"
            )
    return ExitCode.RETRYABLE if result.get("stopped_early") else ExitCode.OK
