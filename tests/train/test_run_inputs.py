"""A run trains on the inputs its training started with: every later pass (``ffjobs run
--resume``, a SLURM retry, an Airflow task) continues on them, and asking for others is
refused before anything starts."""

from __future__ import annotations

import json

import pytest

from ffjobs.errors import UserError
from ffjobs.runs.run import attach_run, create_run, finish_run
from ffjobs.train.stage import run_inputs

from .helpers import tiny_config


def test_a_run_keeps_the_inputs_its_training_started_on(tmp_path):
    config = tiny_config(tmp_path, f"runs_dir={tmp_path / 'runs'}")
    run = create_run(config, key="inputs", echo=lambda line: None)
    assert run_inputs(run, "memory") == "memory"
    finish_run(run, "FINISHED")
    assert json.loads((run.dir / "run.json").read_text())["train_data"] == "memory"

    later = attach_run(run.dir, echo=lambda line: None)  # a later pass holds the run
    assert run_inputs(later, None) == "memory"  # nothing asked: what it started with
    assert run_inputs(later, "memory") == "memory"
    with pytest.raises(UserError, match="run inputs trains on --data memory.*--data dataset"):
        run_inputs(later, "dataset")


def test_a_run_asked_for_nothing_trains_on_its_dataset(tmp_path):
    config = tiny_config(tmp_path, f"runs_dir={tmp_path / 'runs'}")
    run = create_run(config, key="plain", echo=lambda line: None)
    assert run_inputs(run, None) == "dataset"
    finish_run(run, "FINISHED")
    with pytest.raises(UserError, match="--data dataset"):
        run_inputs(attach_run(run.dir, echo=lambda line: None), "memory")
