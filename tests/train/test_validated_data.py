"""Training starts only on the dataset its run validated: the ranks refuse one whose files were
added, removed or changed since, before the first step, naming them by their path relative to
the dataset root; a file that vanishes during training fails the run as DATA by that same path.
Neither is retried: the local attempt is recorded as ``data``, not retryable."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from ffjobs.config import Config, load_config
from ffjobs.data.synth import generate_dataset
from ffjobs.errors import ExitCode
from ffjobs.runs.run import create_run, finish_run
from ffjobs.runs.stages import run_stage
from ffjobs.train.attempts import read_attempts

from .helpers import TINY_MODEL


def config_for(tmp_path: Path, data: Path, *overrides: str) -> Config:
    """Two local ranks of the tiny model (a random frozen identity encoder: nothing
    pre-trained) on ``data``, every identity in training."""
    return load_config(
        "local",
        [
            *TINY_MODEL,
            "model.identity_weights=null",
            f"data.source={data}",
            "data.val_fraction=0",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
            "slurm.tasks_per_node=2",
            "train.batch_size=2",
            "train.steps=4",
            "train.log_every=1",
            "train.checkpoint_every=2",
            "train.precision=fp32",
            "train.progress=false",
            f"train.checkpoint_dir={tmp_path / 'ckpt'}",
            f"runs_dir={tmp_path / 'runs'}",
            "tracking.enabled=false",
            *overrides,
        ],
    )


def validated_run(config: Config, key: str):
    run = create_run(config, key=key, echo=lambda line: None)
    validation = run_stage(config, run, "validate")
    assert validation.status == "passed", validation.summary
    assert Path(validation.facts["validated_files"]).exists()
    return run


def assert_one_data_attempt(run, outcome, named: str) -> dict:
    assert outcome.status == "failed" and outcome.exit_code == ExitCode.FAILED
    assert outcome.facts["failure"] == "data", outcome.summary
    assert named in outcome.summary
    (attempt,) = read_attempts(run)  # nothing retried it
    assert attempt["kind"] == "data" and not attempt["retryable"], attempt
    assert named in attempt["summary"]
    return attempt


def test_files_changed_after_validation_are_refused_before_the_first_step(tmp_path):
    data = generate_dataset(tmp_path / "faces", identities=4, per_identity=4, size=32)
    config = config_for(tmp_path, data)
    run = validated_run(config, "changed")
    (data / "id_0002" / "01.jpg").unlink()  # six folders of this dataset have a 01.jpg
    (data / "id_0003" / "02.jpg").write_bytes((data / "id_0000" / "00.jpg").read_bytes())
    (data / "id_0001" / "07.jpg").write_bytes((data / "id_0001" / "00.jpg").read_bytes())

    outcome = run_stage(config, run, "train")
    finish_run(run, "FAILED")
    attempt = assert_one_data_attempt(run, outcome, "1 removed (id_0002/01.jpg)")
    assert "1 added (id_0001/07.jpg)" in outcome.summary
    assert "1 changed (id_0003/02.jpg)" in outcome.summary
    assert attempt["final_step"] is None and attempt["checkpoint_step"] is None
    assert not list((tmp_path / "ckpt").glob("*/step-*.pt"))  # no step was taken
    log = Path(outcome.facts["log"]).read_text()
    assert "DatasetChangedError" in log and "training refused before its first step" in log


def test_a_file_that_vanishes_during_training_is_data_named_by_its_path(tmp_path):
    data = generate_dataset(tmp_path / "faces", identities=4, per_identity=4, size=32)
    go = tmp_path / "go"
    # 16 images, 2 per rank a step: every image is a target once every 4 steps
    config = config_for(
        tmp_path, data, "train.steps=12", "train.faults.pause_at_step=2",
        f"train.faults.pause_until_file={go}",
    )  # fmt: skip
    run = validated_run(config, "vanished")
    rank0 = run.stage_dir("train") / "logs" / "rank-00000.log"
    outcome = {}
    training = threading.Thread(target=lambda: outcome.update(out=run_stage(config, run, "train")))
    training.start()
    deadline = time.monotonic() + 120
    while "paused at step 2" not in (rank0.read_text() if rank0.exists() else ""):
        assert training.is_alive() and time.monotonic() < deadline, "training never paused"
        time.sleep(0.2)
    (data / "id_0002" / "01.jpg").unlink()  # the dataset check at start-up is behind us
    go.touch()
    training.join(timeout=300)
    finish_run(run, "FAILED")
    attempt = assert_one_data_attempt(run, outcome["out"], "id_0002/01.jpg")
    assert "dataset file missing or changed" in attempt["summary"]
    assert "No such file or directory: 'id_0002/01.jpg'" in "\n".join(attempt["evidence"])
    assert json.loads((run.dir / "run.json").read_text())["status"] == "failed"
