"""One training rank: join the group, build data and models, train (or benchmark), leave.

Started by :mod:`ffjobs.train.launch` (``python -m ffjobs.train.worker``, one process per rank),
by torchrun, or in-process for a single rank. The resolved config travels as a JSON file.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ffjobs.config import Config, config_from_dict
from ffjobs.errors import ExitCode
from ffjobs.tracking.mlflow_logger import RunLogger
from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import compute_cleanup, compute_init

DATA_KINDS = ("dataset", "memory")
"""``dataset``: the configured image dataset (training identities); ``memory``: random tensors."""


def build_train_dataset(config: Config, kind: str, world_size: int) -> torch.utils.data.Dataset:
    """The dataset the trainer samples from."""
    tc = config.train
    if kind == "memory":
        # the same items whatever the split into ranks and micro-batches (DDP equivalence)
        length = max(64, 8 * tc.batch_size * tc.grad_accum * world_size)
        return RandomPairs(length, config.model.resolution, seed=tc.seed)
    from ffjobs.data.dataset import FacePairDataset
    from ffjobs.data.index import index_from_config, split_identities

    index = index_from_config(config.data, s3=config.s3)
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


def run_rank(
    config: Config, mode: str = "train", data: str = "dataset", bench: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run this process's rank to the end; returns the result (meaningful on rank 0)."""
    from ffjobs.train.trainer import Trainer

    tc = config.train
    env, device = compute_init(tc.backend, tc.init_timeout_s, tc.collective_timeout_s)
    try:
        dataset = build_train_dataset(config, data, env.world_size)
        logger = RunLogger(config.tracking, active=env.rank == 0 and mode == "train")
        trainer = Trainer(
            config, env, device, dataset, logger=logger, flops_per_image=flops_per_image(config)
        )
        if mode == "bench":
            from ffjobs.bench.train import bench_rank

            return bench_rank(trainer, **(bench or {}))
        try:
            result = trainer.train()
        except BaseException:
            logger.finish("FAILED")
            raise
        logger.finish("KILLED" if result.stopped_early else "FINISHED")
        out = asdict(result)
        out.update(
            world_size=env.world_size,
            backend=str(torch.distributed.get_backend()) if env.is_distributed else "none",
            device=str(device),
            checkpoint_dir=trainer.checkpointer.location,
            mlflow_run_id=logger.run_id,
        )
        return out
    finally:
        compute_cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ffjobs.train.worker")
    parser.add_argument("--config-json", required=True, type=Path)
    parser.add_argument("--mode", choices=("train", "bench"), default="train")
    parser.add_argument("--data", choices=DATA_KINDS, default="dataset")
    parser.add_argument("--bench-json", default="{}", help="keyword arguments of bench_rank")
    parser.add_argument("--result", type=Path, default=None, help="rank 0 writes its result here")
    args = parser.parse_args(argv)
    config = config_from_dict(json.loads(args.config_json.read_text()), str(args.config_json))
    result = run_rank(config, args.mode, args.data, json.loads(args.bench_json))
    if args.result is not None and result:
        args.result.write_text(json.dumps(result, default=str))
    return int(ExitCode.RETRYABLE if result.get("stopped_early") else ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
