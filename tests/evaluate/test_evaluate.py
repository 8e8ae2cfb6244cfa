"""Evaluation of a real trained model on held-out identities: what it measures, that it is
deterministic, the stage's report and facts, the optional metrics, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ffjobs.errors import UserError
from ffjobs.models.factory import build_generator
from ffjobs.models.identity import build_identity_encoder
from ffjobs.models.swap import FaceSwap
from ffjobs.quality.encoder import load_evaluation_encoder
from ffjobs.quality.evalset import build_evaluation_set
from ffjobs.quality.measure import Extractors, measure
from ffjobs.train.swap import face_swap_from_checkpoint
from ffjobs.train.trainer import seed_everything

from .conftest import COMMAND_S, STEPS, TRAINED_S, ffjobs

CPU = torch.device("cpu")
# the shared trained model (about a minute on 2 cores), then the test's own work
pytestmark = [pytest.mark.slow, pytest.mark.timeout(TRAINED_S + 600)]

RETRIEVAL_MARGIN = 2
"""Held-out swaps the trained model must get right beyond the untrained one's (see below)."""


def untrained_model(config) -> FaceSwap:
    """The generator as the trainer starts it (same seed), with the training encoder."""
    seed_everything(config.train.seed)
    return FaceSwap(
        build_generator(config.model), build_identity_encoder(config.model), config.model.resolution
    )


def test_the_run_evaluated_its_checkpoint_and_the_gate_passed(trained):
    stages = {s["name"]: s for s in trained.summary["stages"]}
    assert list(stages) == ["validate", "train", "evaluate"]
    evaluation = stages["evaluate"]
    assert evaluation["status"] == "passed", evaluation["summary"]
    facts = evaluation["facts"]
    assert facts["step"] == STEPS
    assert facts["eval_set"] == {"identities": 4, "images": 24, "pairs": 24}
    assert set(facts["metrics"]) == {"identity_top1", "identity_cosine", "psnr", "ssim"}
    # each metric with its 95% interval around it, and retrieval tested against chance
    assert facts["interval_level"] == 0.95 and set(facts["intervals"]) == set(facts["metrics"])
    for metric, (low, high) in facts["intervals"].items():
        assert low <= facts["metrics"][metric] <= high, metric
    assert facts["identity_top1_vs_chance"]["chance"] == 0.25
    assert set(facts["skipped"]) == {"pose_error", "fid"}
    assert "set evaluate.fid_weights to a TorchScript feature extractor" in facts["skipped"]["fid"]
    assert facts["champion"] is None and "thresholds only" in evaluation["summary"]
    assert facts["gate"]["passed"] and facts["gate"]["reasons"][0].startswith("identity_top1 ")
    assert "iresnet34" in facts["encoder"]
    # a set written by generate_dataset alone carries no marker: no ground truth to compare with
    assert facts["ground_truth_swap"]["skipped"].startswith("no ground truth: ")
    report = json.loads(Path(facts["report"]).read_text())
    assert report["metrics"] == facts["metrics"] and report["gate"] == facts["gate"]
    from PIL import Image

    from ffjobs.evaluate.samples import LABEL_WIDTH, PAD

    # 3 labelled rows (source, target, fused) of 8 pairs, the 64 px faces shown at 128 px
    with Image.open(facts["samples"]) as grid:
        assert grid.size == (LABEL_WIDTH + 8 * (128 + PAD) + PAD, PAD + 3 * (128 + 16 + PAD))
    assert len(facts["sample_identity"]) == 8
    assert all(-1 <= score <= 1 for score in facts["sample_identity"])  # cosines
    assert evaluation["metrics"]["eval_gate_passed"] == 1.0


def test_a_trained_model_beats_an_untrained_one_and_evaluation_is_deterministic(trained):
    config = trained.config()
    evalset = build_evaluation_set(config)
    encoder = load_evaluation_encoder(config)
    model, step = face_swap_from_checkpoint(
        config, str(trained.root / "runs/checkpoints" / trained.run_key)
    )
    assert step == STEPS
    ours = measure(model, evalset, encoder, Extractors(), batch_size=16, device=CPU).metrics
    before = measure(
        untrained_model(config), evalset, encoder, Extractors(), batch_size=16, device=CPU
    ).metrics
    # retrieval: the untrained generator draws nearly one face for every pair, which lands on
    # one identity and is right for the pairs whose source that is (5 of 24 here, about
    # 1 / identities). Training diverges with the CPU's rounding, so each platform draws its own
    # trajectory: 14 trainings of this fixture (train.seed 0-8 on a GPU, 0-4 on this kind of
    # CPU) got 3 to 8 more of the 24 right than the untrained model (mean 6); two more queries
    # leave room for a platform one query below the worst seen
    pairs = evalset.size()["pairs"]
    right, right_before = (round(metrics["identity_top1"] * pairs) for metrics in (ours, before))
    assert right >= right_before + RETRIEVAL_MARGIN, (ours, before)
    assert ours["identity_cosine"] > before["identity_cosine"], (ours, before)
    assert ours["psnr"] > before["psnr"] and ours["ssim"] > before["ssim"], (ours, before)
    # the same model on a freshly built set of the same config: the very same numbers (fixed
    # pairing seed, per-image metrics, so batching does not change a sum's order)
    again = measure(
        model, build_evaluation_set(config), encoder, Extractors(), batch_size=7, device=CPU
    )
    assert again.metrics == pytest.approx(ours, rel=1e-6)
    report = [s for s in trained.summary["stages"] if s["name"] == "evaluate"][0]["facts"]
    assert report["metrics"] == pytest.approx(ours, rel=1e-6)


class MeanColourPose(torch.nn.Module):
    """A stand-in pose regressor: the image's mean colour as a 3-vector."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3))


class PooledFeatures(torch.nn.Module):
    """A stand-in feature extractor: 4x4 average pooled grey levels, 16 features."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grey = images.mean(dim=1, keepdim=True)
        return torch.nn.functional.adaptive_avg_pool2d(grey, 4).flatten(1)


class WrongShape(torch.nn.Module):
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=1)


def test_pose_error_and_fid_with_the_users_torchscript_files(trained, tmp_path):
    from ffjobs.evaluate.stage import evaluate_stage
    from ffjobs.runs.run import create_run

    pose, fid = tmp_path / "pose.pt", tmp_path / "fid.pt"
    torch.jit.save(torch.jit.script(MeanColourPose()), pose)
    torch.jit.save(torch.jit.script(PooledFeatures()), fid)
    config = trained.config(
        f"evaluate.pose_weights={pose}",
        f"evaluate.fid_weights={fid}",
        f"runs_dir={tmp_path / 'runs'}",
        f"train.checkpoint_dir={trained.root / 'runs/checkpoints'}",
    )
    run = create_run(config, key=trained.run_key)  # its checkpoints are the shared run's
    outcome = evaluate_stage(config, run)
    assert outcome.status == "passed", outcome.summary
    assert outcome.facts["skipped"] == {}
    metrics = outcome.facts["metrics"]
    assert metrics["pose_error"] > 0 and metrics["fid"] > 0
    assert outcome.metrics["eval_fid"] == metrics["fid"]

    torch.jit.save(torch.jit.script(WrongShape()), tmp_path / "bad.pt")
    bad = trained.config(f"evaluate.pose_weights={tmp_path / 'bad.pt'}")
    with pytest.raises(UserError, match=r"evaluate.pose_weights: .*bad.pt: returns \[2, 64, 64\]"):
        evaluate_stage(bad, run)
    missing = trained.config(f"evaluate.fid_weights={tmp_path / 'none.pt'}")
    with pytest.raises(UserError, match=r"evaluate.fid_weights: .*none.pt: file not found"):
        evaluate_stage(missing, run)
    (tmp_path / "text.pt").write_text("not a model")
    garbage = trained.config(f"evaluate.fid_weights={tmp_path / 'text.pt'}")
    with pytest.raises(UserError, match=r"text.pt: not a TorchScript file"):
        evaluate_stage(garbage, run)


def test_bad_input_is_one_line_naming_what_and_where(trained, tmp_path):
    from ffjobs.evaluate.stage import evaluate_stage
    from ffjobs.runs.run import create_run

    config = trained.config(f"runs_dir={tmp_path / 'runs'}", f"train.checkpoint_dir={tmp_path}")
    run = create_run(config, key="never-trained")
    with pytest.raises(
        UserError, match="no verified checkpoint that loads safely to build a model from"
    ):
        evaluate_stage(config, run)

    trained_config = [
        f"runs_dir={tmp_path / 'runs'}",
        f"train.checkpoint_dir={trained.root / 'runs/checkpoints'}",
    ]
    run = create_run(trained.config(*trained_config), key=trained.run_key)
    no_split = trained.config(*trained_config, "data.val_fraction=0.0")
    with pytest.raises(
        UserError, match=r"data.val_fraction: the held-out split .* has 0 identities"
    ):
        evaluate_stage(no_split, run)
    missing = trained.config(*trained_config, f"evaluate.identity_weights={tmp_path / 'arc.pt'}")
    with pytest.raises(UserError, match=r"evaluate.identity_weights: .*arc.pt not found"):
        evaluate_stage(missing, run)
    # the evaluation encoder's file, read as another shape than it was trained with
    wider = trained.config(*trained_config, "evaluate.identity_dim=64")
    with pytest.raises(
        UserError, match=r"identity-eval.pt: does not fit .* check evaluate.identity_arch"
    ):
        evaluate_stage(wider, run)


def test_evaluate_help_and_the_command_on_a_run(trained):
    shown = ffjobs(trained.root, "evaluate", "--help", timeout=COMMAND_S)
    assert shown.returncode == 0
    for words in ("--run-key KEY", "--model URI", "never saw", "evaluate.fid_weights", "Exit code"):
        assert words in shown.stdout, words
    neither = ffjobs(trained.root, "evaluate", timeout=COMMAND_S)
    assert neither.returncode == 2 and "one of the arguments --run-key --model" in neither.stderr

    again = ffjobs(trained.root, "evaluate", "--run-key", trained.run_key,
                   "--set", f"runs_dir={trained.root / 'runs'}", "--json")  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout)
    assert result["name"] == "evaluate" and result["status"] == "passed"
    first = [s for s in trained.summary["stages"] if s["name"] == "evaluate"][0]["facts"]
    assert result["facts"]["metrics"] == first["metrics"]  # the same checkpoint, the same numbers
    record = json.loads((trained.run_dir / "run.json").read_text())
    assert record["passes"] == 2 and [s["name"] for s in record["stages"]][-1] == "evaluate"
