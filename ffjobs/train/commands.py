"""``ffjobs train``: train on this machine's ranks (gloo on CPU, NCCL on GPUs) as a new run.

Under torchrun or ``srun`` with several tasks, each process is one rank of the job instead: the
ranks share the run named by ``--run-key`` (default: torchrun's ``--rdzv-id`` or the SLURM job
id), rank 0 creates it, or continues it after a restart, and records the outcome.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ffjobs.cli import add_nproc_argument, config_from_args, print_json
from ffjobs.errors import ExitCode, UserError
from ffjobs.local_ranks import STOPPED_ON_REQUEST, external_run_key, launched_rank
from ffjobs.runs.cli import add_run_arguments, run_single_stage


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train",
        help="train the face-fusion model (DDP) as a new run",
        description="Train on this machine: --nproc N starts N ranks with a loopback "
        "rendezvous (gloo on CPU, NCCL on GPUs). A new run each time, with its own checkpoint "
        "folder; continue a run with 'ffjobs run --resume RUN_KEY --stages train'. Under "
        "torchrun/srun each process is one rank of the run named by --run-key.",
    )
    add_run_arguments(train)
    add_nproc_argument(train)
    train.add_argument(
        "--data",
        choices=("dataset", "memory"),
        default=None,
        help="dataset (the default): data.source (synthetic one generated if missing); "
        "memory: random tensors, no image decoding. A run keeps what it started training on",
    )
    train.add_argument(
        "--submit",
        action="store_true",
        help="train as SLURM jobs of the cluster profile (sets slurm.executor=slurm)",
    )
    train.add_argument(
        "--wait",
        action="store_true",
        help="with --submit: supervise until done, retrying retryable failures from the newest "
        "checkpoint with suspect nodes excluded (without it: submit and return)",
    )
    train.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    if launched_rank():
        return _train_as_rank(args)
    if args.wait and not args.submit:
        raise UserError("--wait goes with --submit (training here always waits)")
    if args.submit:
        args.overrides.append("slurm.executor=slurm")
    wait = args.wait or not args.submit
    run, outcome = run_single_stage(args, "train", data=args.data, wait=wait)
    if args.json:
        print_json({"run_key": run.key, "run_dir": str(run.dir), **outcome.to_dict()})
    else:
        print(f"run {run.key}: {run.dir}; checkpoints in {run.checkpoint_dir}")
    return int(outcome.exit_code)


def _train_as_rank(args: argparse.Namespace) -> int:
    """One rank of a torchrun/srun job: rank 0 holds the run, every rank trains."""
    from ffjobs.runs.run import RUN_FILE, create_run, finish_run, join_location, resume_run
    from ffjobs.runs.stages import check_plan, run_stage
    from ffjobs.train.compile.signing import run_key_file
    from ffjobs.train.job import TrainJob
    from ffjobs.train.worker import run_rank

    if args.nproc is not None:
        raise UserError("--nproc: under torchrun/srun the launcher starts the ranks; drop it")
    key = args.run_key or external_run_key()
    if key is None:
        raise UserError(
            "under torchrun, name the run every rank shares: --run-key KEY or torchrun --rdzv-id"
        )
    config = config_from_args(args)
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    if rank != 0:  # only rank 0 touches the run's record, its MLflow run and the demo inputs
        location = join_location(config.train.checkpoint_dir, key)
        run_dir = Path(config.runs_dir, key).resolve()
        key_file = run_key_file(run_dir)  # rank 0's run makes it
        data = args.data or _started_inputs(run_dir) or "dataset"  # as rank 0's run_inputs
        job = TrainJob.of(
            config, checkpoint_dir=location, signing_key_file=str(key_file), data=data
        )
        return STOPPED_ON_REQUEST if run_rank(job).get("stopped_early") else int(ExitCode.OK)
    check_plan(config, ("train",))
    if os.path.exists(os.path.join(config.runs_dir, key, RUN_FILE)):
        from ffjobs.train.checkpoint import latest_step

        # a restarted worker group continues the same run
        run = resume_run(key, config, latest_step=latest_step)
    else:
        run = create_run(config, key=key)
    outcome = run_stage(config, run, "train", data=args.data)
    finish_run(run, "FAILED" if outcome.status == "failed" else "FINISHED")
    if args.json:
        print_json({"run_key": run.key, "run_dir": str(run.dir), **outcome.to_dict()})
    return int(outcome.exit_code)


def _started_inputs(run_dir: Path) -> str | None:
    """The inputs a continued run's training started on (its record), None for a new run."""
    import json

    from ffjobs.runs.run import RUN_FILE

    try:
        return json.loads((run_dir / RUN_FILE).read_text()).get("train_data")
    except (OSError, ValueError):
        return None
