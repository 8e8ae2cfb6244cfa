"""Training resumes from the previous checkpoint when the newest one is corrupted."""

from __future__ import annotations

import pytest

from ffjobs.train.checkpoint import CheckpointWarning, data_name
from ffjobs.train.checkpoint.storage import LocalStore
from ffjobs.train.faults import corrupt_blob
from ffjobs.train.job import TrainJob
from ffjobs.train.worker import run_rank

from .helpers import tiny_config


@pytest.mark.parametrize("mode", ["truncate", "flip"])
def test_corrupted_newest_checkpoint_falls_back_to_the_previous(tmp_path, mode):
    first = run_rank(TrainJob.of(tiny_config(tmp_path, "train.deterministic=false"), data="memory"))
    assert first["final_step"] == 4
    corrupt_blob(LocalStore(tmp_path / "ckpt"), data_name(4), mode=mode)

    longer = tiny_config(tmp_path, "train.deterministic=false", "train.steps=6")
    with pytest.warns(CheckpointWarning, match=data_name(4)):
        second = run_rank(TrainJob.of(longer, data="memory"))
    assert second["start_step"] == 2 and second["final_step"] == 6


def test_corrupt_checkpoint_drill_damages_what_it_just_wrote(tmp_path):
    from ffjobs.train.checkpoint import Checkpointer

    run_rank(
        TrainJob.of(
            tiny_config(tmp_path, "train.deterministic=false", "train.steps=2"), data="memory"
        )
    )
    drill = tiny_config(
        tmp_path, "train.deterministic=false", "train.faults.corrupt_latest_checkpoint=true"
    )
    assert run_rank(TrainJob.of(drill, data="memory"))["final_step"] == 4
    with pytest.warns(CheckpointWarning, match=data_name(4)):
        ref = Checkpointer(str(tmp_path / "ckpt")).latest_verified()
    assert ref is not None and ref.step == 2
