"""The held-out measurement during training (``evaluate.every_steps``): what rank 0 measures
and logs at which steps, that a run measured on the way trains exactly as one that is not, and
that a missing recogniser is said once instead of stopping or stalling training."""

from __future__ import annotations

import random

import torch

from ffjobs.data.synth import generate_dataset
from ffjobs.models.identity import build_identity_backbone
from ffjobs.quality.encoder import evaluation_identity_settings
from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import DistEnv
from ffjobs.train.probe import TrainingProbe
from ffjobs.train.trainer import Trainer

from .helpers import tiny_config

SINGLE = DistEnv(0, 1, 0, "127.0.0.1", 0, "single")
MEASURED = {"heldout_identity_top1", "heldout_identity_cosine", "heldout_psnr", "heldout_ssim"}


class Recorder:
    """The metrics a trainer logs, by step (the MLflow logger's two calls)."""

    def __init__(self):
        self.metrics: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.metrics.setdefault(step, {}).update(metrics)

    def set_tags(self, tags: dict[str, str]) -> None:
        pass


def _config(tmp_path, *sets: str):
    faces = tmp_path / "faces"
    if not faces.exists():  # 10 identities: 2 held out (data.val_fraction 0.2)
        generate_dataset(faces, identities=10, per_identity=3, size=64, seed=0)
    config = tiny_config(tmp_path, f"data.source={faces}", "train.deterministic=false", *sets)
    recogniser = tmp_path / "recogniser.pt"
    if not recogniser.exists():  # untrained: what it scores does not matter here
        torch.manual_seed(0)
        settings = evaluation_identity_settings(config)
        torch.save(build_identity_backbone(settings).state_dict(), recogniser)
    return tiny_config(
        tmp_path, f"data.source={faces}", "train.deterministic=false",
        f"evaluate.identity_weights={recogniser}", *sets,
    )  # fmt: skip


def _train(config, probe: TrainingProbe | None) -> tuple[Trainer, Recorder]:
    recorder = Recorder()
    dataset = RandomPairs(16, config.model.resolution, seed=0)
    trainer = Trainer(config, SINGLE, torch.device("cpu"), dataset, logger=recorder, probe=probe)
    list(trainer.run_steps(4))
    return trainer, recorder


def test_a_run_measured_every_two_steps_logs_heldout_metrics_and_trains_as_one_that_is_not(
    tmp_path, capsys
):
    config = _config(tmp_path, "evaluate.every_steps=2", "train.checkpoint_every=100")
    torch.manual_seed(123)
    random.seed(123)
    measured, recorded = _train(config, TrainingProbe(config, torch.device("cpu")))
    after_measured = (torch.rand(3), random.random())
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("held-out")]

    torch.manual_seed(123)
    random.seed(123)
    plain, _ = _train(config, None)
    after_plain = (torch.rand(3), random.random())

    assert [step for step, m in recorded.metrics.items() if set(m) >= MEASURED] == [2, 4]
    assert 0 <= recorded.metrics[4]["heldout_identity_top1"] <= 1
    assert len(lines) == 2 and lines[1].startswith("held-out at step 4: identity_top1 ")
    assert "chance 0.5: 6 pairs are too few to tell" in lines[1], lines[1]
    assert lines[1].endswith("; 2 held-out identities")
    # measuring took no random number from training and changed no weight: exactly equal
    assert torch.equal(after_measured[0], after_plain[0]) and after_measured[1] == after_plain[1]
    for ours, theirs in zip(measured.networks, plain.networks, strict=True):
        for key, value in ours.module.state_dict().items():
            assert torch.equal(value, theirs.module.state_dict()[key]), (ours.name, key)
    assert measured.g_module.training  # the generator was measured as a copy, in eval mode


def test_without_its_recogniser_the_probe_says_so_once_and_training_goes_on(tmp_path, capsys):
    config = _config(tmp_path, "evaluate.every_steps=2", "evaluate.identity_weights=absent.pt")
    probe = TrainingProbe(config, torch.device("cpu"))
    _, recorded = _train(config, probe)
    said = [x for x in capsys.readouterr().out.splitlines() if "held-out" in x]
    assert said == [
        "no held-out measurement during training (evaluate.every_steps): "
        "evaluate.identity_weights: absent.pt not there (the train stage makes the project's "
        "own before training)"
    ]
    assert probe.every == 0 and not any(MEASURED & set(m) for m in recorded.metrics.values())
