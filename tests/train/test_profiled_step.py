"""A profiled training step (``ffjobs bench train --profile``) leaves its table, phases, trace."""

from __future__ import annotations

import json

import torch

from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import DistEnv
from ffjobs.train.profile import profile_steps
from ffjobs.train.trainer import Trainer

from .helpers import tiny_config


def test_a_profiled_step_writes_the_kernel_table_phases_and_trace(tmp_path):
    config = tiny_config(tmp_path, "train.deterministic=false", "model.identity_weights=null")
    dataset = RandomPairs(16, config.model.resolution, seed=0)
    env = DistEnv(0, 1, 0, "127.0.0.1", 0, "single")
    trainer = Trainer(config, env, torch.device("cpu"), dataset)
    summary = profile_steps(trainer, 1, tmp_path / "profile")

    out = tmp_path / "profile"
    assert {p.name for p in out.iterdir()} >= {
        "kernels.txt",
        "kernels.json",
        "ranges.txt",
        "trace.json.gz",
        "compile-times.txt",
    }
    rows = json.loads((out / "kernels.json").read_text())
    assert any(row["name"] == "aten::convolution" for row in rows)
    phases = (out / "ranges.txt").read_text()
    for phase in ("generator_forward", "discriminator_backward", "optimizer", "data_wait"):
        assert f"ffjobs.{phase}" in phases
    assert summary["profile_steps"] == 1 and summary["profile_step_s"] > 0
    assert trainer.step == 2  # one step before the profiler starts, one profiled
