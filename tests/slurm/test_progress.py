"""Rank 0's progress record: what the supervisor, ``ffjobs bench recovery`` and the drills read
of a job's starts and steps, whatever the rank logs say (or, with ``train.progress: false``,
do not say)."""

from __future__ import annotations

import time

import pytest
import torch

from ffjobs.slurm.progress import (
    PROGRESS_ENV,
    ProgressRecord,
    Start,
    progress_file,
    read_starts,
    summary,
)


def test_a_requeued_job_appends_a_start_that_owns_the_steps_after_it(tmp_path):
    path = progress_file(tmp_path, "42")
    assert path == tmp_path / "42_progress.jsonl"
    first = ProgressRecord(path)
    first.first_step(0, 100.0)
    for step in (1, 2, 5):
        first.reached(step, 100.0 + step)
    again = ProgressRecord(path)  # the job requeued after a node failure: the same file
    again.first_step(4, 180.5)
    for step in (5, 60):
        again.reached(step, 180.0 + step)
    assert read_starts(path) == [Start(100.0, 0, (1, 2, 5)), Start(180.5, 4, (5, 60))]
    assert summary(read_starts(path)[:1]) == {
        "start_step": 0,
        "first_step_at": 100.0,
        "final_step": 5,
    }
    assert summary([]) == {"start_step": None, "first_step_at": None, "final_step": None}


def test_a_line_cut_short_by_a_crash_and_a_missing_record_are_read_as_what_they_hold(tmp_path):
    path = tmp_path / "7_progress.jsonl"
    record = ProgressRecord(path)
    record.first_step(10, 5.0)
    record.reached(11, 6.0)
    with path.open("a") as out:
        out.write('{"step": 12, "a')  # the rank died mid-write
    assert read_starts(path) == [Start(5.0, 10, (11,))]
    assert read_starts(tmp_path / "none.jsonl") == []


def test_only_rank_0_with_a_named_file_writes(tmp_path, monkeypatch):
    path = tmp_path / "1_progress.jsonl"
    monkeypatch.setenv(PROGRESS_ENV, str(path))
    ProgressRecord.for_rank(1).first_step(0, 1.0)
    assert not path.exists()
    ProgressRecord.for_rank(0).first_step(0, 1.0)
    assert read_starts(path) == [Start(1.0, 0)]
    monkeypatch.delenv(PROGRESS_ENV)
    assert ProgressRecord.for_rank(0).path is None


def test_a_record_that_cannot_be_written_warns_once_and_training_goes_on(tmp_path):
    record = ProgressRecord(tmp_path / "gone" / "1_progress.jsonl")
    with pytest.warns(UserWarning, match=r"1_progress.jsonl: cannot write"):
        record.first_step(0, 1.0)
    record.reached(1, 2.0)  # no second warning: the record stopped writing
    assert record.path is None


def test_the_trainer_records_its_start_and_each_reported_step(tmp_path, monkeypatch):
    from train.helpers import tiny_config

    from ffjobs.train.data import RandomPairs
    from ffjobs.train.distributed import DistEnv
    from ffjobs.train.trainer import Trainer

    path = tmp_path / "9_progress.jsonl"
    monkeypatch.setenv(PROGRESS_ENV, str(path))
    config = tiny_config(tmp_path, "model.identity_weights=null", "train.progress=false")
    env = DistEnv(0, 1, 0, "127.0.0.1", 0, "single")
    before = time.time()
    Trainer(config, env, torch.device("cpu"), RandomPairs(16, config.model.resolution)).train()
    (start,) = read_starts(path)
    # tiny_config: 4 steps reported every 2; the first step's time is this process's clock
    assert (start.start_step, start.steps) == (0, (2, 4))
    assert before <= start.first_step_at <= time.time()
