"""One trained tiny face-swap run for the registry tests, tracked on the session's real MLflow
server, and runs that reuse its checkpoint to register further versions cheaply."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from train.helpers import tiny_config  # tests/ is on sys.path (rootdir conftest)

from ffjobs.config import Config
from ffjobs.runs.run import Run, StageOutcome, create_run
from ffjobs.runs.stages import run_stage

TRAIN_STEPS = 24


@dataclass
class TrainedRun:
    config: Config
    run: Run
    data: Path
    root: Path


def evaluate_outcome(step: int, *, champion: dict | None = None) -> StageOutcome:
    """What the evaluate stage records for a model that passed its gate."""
    return StageOutcome(
        "evaluate",
        "passed",
        1.0,
        "identity_top1 0.50, psnr 14.2",
        facts={
            "report": "evaluate/evaluation.json",
            "samples": "evaluate/samples.png",
            "step": step,
            "metrics": {"identity_top1": 0.5, "identity_cosine": 0.41, "psnr": 14.2, "ssim": 0.31},
            "skipped": {"fid": "set evaluate.fid_weights to a TorchScript feature extractor"},
            "eval_set": {"identities": 4, "images": 16, "pairs": 16},
            "encoder": "iresnet18 x0.25 (evaluation encoder)",
            "champion": champion,
            "gate": {"passed": True, "reasons": ["identity_top1 0.50 >= 0.30 (threshold)"]},
        },
    )


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, mlflow_server) -> TrainedRun:
    """A real run: validate and train (identity loss only, on 4 identities: a few CPU steps),
    then a recorded evaluation."""
    from ffjobs.data.synth import generate_dataset

    root = tmp_path_factory.mktemp("registry")
    data = generate_dataset(root / "data", identities=4, per_identity=4, size=64, seed=0)
    config = tiny_config(
        root,
        f"data.source={data}",
        "data.val_fraction=0",
        f"runs_dir={root / 'runs'}",
        f"train.steps={TRAIN_STEPS}",
        f"train.checkpoint_every={TRAIN_STEPS}",
        "train.log_every=8",
        "train.batch_size=4",
        "train.lr=2e-3",
        "train.ema_decay=null",  # the EMA of 24 steps would still be the initial generator
        "model.losses.adversarial=0",
        "model.losses.feature_matching=0",
        "model.losses.reconstruction=0",
        "slurm.tasks_per_node=1",
        "preflight.enabled=false",
        "tracking.enabled=true",
        f"tracking.tracking_uri={mlflow_server.uri}",
        "registry.model_name=face-swap-under-review",
    )
    run = create_run(config, echo=lambda _line: None)
    assert run_stage(config, run, "validate").status == "passed"
    assert run_stage(config, run, "preflight").status == "skipped"
    train = run_stage(config, run, "train")
    assert train.status == "passed", train.summary
    run.record_outcome(evaluate_outcome(TRAIN_STEPS))
    return TrainedRun(config, run, data, root)


def candidate_run(trained: TrainedRun, config: Config) -> Run:
    """A new run (its own MLflow run) holding a copy of the trained checkpoint, as if it had
    been validated, trained and evaluated: one more version to register in seconds."""
    run = create_run(config, echo=lambda _line: None)
    for stage in ("validate", "preflight", "train"):
        run.record_outcome(StageOutcome(**trained.run.outcome(stage)))
    run.record["dataset_fingerprint"] = trained.run.record["dataset_fingerprint"]
    run.record_outcome(evaluate_outcome(TRAIN_STEPS))
    shutil.copytree(trained.run.checkpoint_dir, run.checkpoint_dir)
    return run
