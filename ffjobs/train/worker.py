"""A training rank: :func:`run_rank` joins the group, builds data and models, trains or
benchmarks, and leaves.

A rank is started by :func:`ffjobs.train.launch.launch_job` through the one local launcher
(:mod:`ffjobs.local_ranks`: ``python -m ffjobs.train.worker JOB.json``, one process per rank),
by torchrun, or by a SLURM task. The job (config, checkpoint folder, MLflow run to attach to,
data choice) travels to the ranks as one JSON file; rank 0 writes its result beside it. Rank
0 attaches to the run's MLflow run by the id in the job; no rank starts or ends an MLflow run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ffjobs.config import Config
from ffjobs.errors import ExitCode
from ffjobs.local_ranks import STOPPED_ON_REQUEST
from ffjobs.process_tree import follow_launcher
from ffjobs.tracking.mlflow_logger import RunLogger
from ffjobs.train.compile.signing import load_or_create_key, user_key_file
from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import DistEnv, compute_cleanup, compute_init
from ffjobs.train.job import DATA_KINDS, TrainJob

__all__ = ["DATA_KINDS", "build_train_dataset", "run_rank"]

MEMORY_EPOCH_STEPS = 1000
"""Optimizer steps per epoch of ``--data memory`` (random images, no decoding)."""


def build_train_dataset(
    config: Config,
    kind: str,
    world_size: int,
    quarantine: str | None = None,
    validated_files: str | None = None,
) -> torch.utils.data.Dataset:
    """The dataset the trainer samples from (training identities, minus the quarantine).

    With ``validated_files`` (what the run's validation passed), a dataset whose files were
    added, removed or changed since raises ``DatasetChangedError`` naming them.
    """
    tc = config.train
    if kind == "memory":
        # the same items whatever the split into ranks and micro-batches (DDP equivalence);
        # epochs of MEMORY_EPOCH_STEPS steps: each new epoch restarts the loader workers'
        # prefetch, which stalled every 8th step when an epoch was the 8-batch image pool
        global_batch = tc.batch_size * tc.grad_accum * world_size
        return RandomPairs(
            MEMORY_EPOCH_STEPS * global_batch,
            config.model.resolution,
            seed=tc.seed,
            distinct=max(64, 8 * global_batch),
        )
    from ffjobs.data.dataset import FacePairDataset
    from ffjobs.data.index import index_from_config, split_identities

    index = index_from_config(
        config.data, quarantine=quarantine, s3=config.s3, validated=validated_files
    )
    train_index, _ = split_identities(index, config.data.val_fraction, config.data.synth.seed)
    return FacePairDataset(
        train_index,
        image_size=config.model.resolution,
        same_identity_prob=config.data.same_identity_prob,
        seed=tc.seed,
    )


def flops_per_image(config: Config) -> float | None:
    """FLOPs of one training image (for MFU); ``None`` with a warning if counting fails."""
    from ffjobs.models.flops import training_flops_per_image

    try:
        return training_flops_per_image(config.model)
    except Exception as exc:  # MFU is a report, not a reason to stop training
        warnings.warn(f"FLOP counting failed, MFU not reported: {exc}", stacklevel=2)
        return None


def reports_mfu(env: DistEnv, device: torch.device, job: TrainJob) -> bool:
    """Whether this rank reports MFU: rank 0, on a GPU (``train.peak_flops`` is a GPU's) or in
    a benchmark (which also measures the device's own peak). Elsewhere the FLOP count (a
    step on the ``meta`` device, about 0.2 CPU-s) would only print a meaningless MFU."""
    return env.rank == 0 and (device.type == "cuda" or job.mode == "bench")


def prepare_compiler(device: torch.device) -> None:
    """What a compiling rank does before its trainer: local caches in node memory, the
    compiler imported (and its first use begun) on this thread."""
    from ffjobs.train.compile.cache import keep_local_caches_in_memory
    from ffjobs.train.compile.regions import import_compiler

    keep_local_caches_in_memory()
    import_compiler(device)


def run_rank(job: TrainJob) -> dict[str, Any]:
    """Run this process's rank of ``job`` to the end; returns the result (meaningful on rank 0)."""
    from ffjobs.train.probe import TrainingProbe
    from ffjobs.train.trainer import Trainer

    config = job.resolved_config()
    tc = config.train
    env, device = compute_init(tc.backend, tc.init_timeout_s, tc.collective_timeout_s)
    if tc.compile:
        prepare_compiler(device)  # with the other imports, before the trainer's clock starts
    try:
        signing_key = None
        if tc.compile and tc.compile_cache:  # read once every rank has joined: rank 0 made it
            key_file = job.signing_key_file or user_key_file(job.checkpoint_dir)
            signing_key = load_or_create_key(key_file)
        dataset = build_train_dataset(
            config, job.data, env.world_size, job.quarantine, job.validated_files
        )
        tracked = env.rank == 0 and job.mode == "train"
        spool = job.tracking_dir if tracked else None  # one writer of training metrics: rank 0
        logger = RunLogger(config.tracking, job.mlflow_run_id, spool, role="train")
        measured = tracked and job.data == "dataset" and config.evaluate.every_steps > 0
        trainer = Trainer(
            config,
            env,
            device,
            dataset,
            checkpoint_dir=job.checkpoint_dir,
            logger=logger,
            flops_per_image=flops_per_image(config) if reports_mfu(env, device, job) else None,
            signing_key=signing_key,
            probe=TrainingProbe(config, device, job.quarantine) if measured else None,
        )
        if job.mode == "bench":
            from ffjobs.train.measure import bench_rank

            return bench_rank(trainer, **job.bench)
        sampler = _system_sampler(config, job, env, logger, lambda: trainer.step)
        try:
            result = trainer.train()
        finally:
            sampler.stop()
            sampler.logger.close()
            logger.close()  # a last delivery; what the server did not take stays spooled
        out = asdict(result)
        out.update(
            world_size=env.world_size,
            backend=str(torch.distributed.get_backend()) if env.is_distributed else "none",
            device=str(device),
            checkpoint_dir=trainer.checkpointer.location,
        )
        return out
    finally:
        compute_cleanup()


def _system_sampler(config: Config, job: TrainJob, env, logger: RunLogger, step) -> Any:
    """The node's system metrics sampler: on the first rank of each node, into the run."""
    from ffjobs.tracking.system_metrics import SystemSampler

    interval = config.tracking.system_metrics_interval_s if env.local_rank == 0 else 0.0
    if env.rank != 0 and interval > 0:  # another node's first rank: a writer of its own
        logger = RunLogger(config.tracking, job.mlflow_run_id, job.tracking_dir, role="system")
    try:
        return SystemSampler(logger, interval, step).start()
    except ImportError:  # psutil missing from this image: no system metrics
        return SystemSampler(logger, 0.0, step)


def main(argv: list[str] | None = None) -> int:
    follow_launcher()  # started by the local launcher: end with it
    parser = argparse.ArgumentParser(prog="python -m ffjobs.train.worker")
    parser.add_argument("job", type=Path, help="the TrainJob as JSON")
    parser.add_argument("--result", type=Path, default=None, help="rank 0 writes its result here")
    args = parser.parse_args(argv)
    job = TrainJob(**json.loads(args.job.read_text()))
    result = run_rank(job)
    if args.result is not None and result and os.environ.get("RANK", "0") == "0":
        args.result.write_text(json.dumps(result, default=str))
    # under an elastic agent a stop is a clean end, or the agent would restart the group
    under_agent = "TORCHELASTIC_RUN_ID" in os.environ
    if result.get("stopped_early") and not under_agent:
        return STOPPED_ON_REQUEST
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
