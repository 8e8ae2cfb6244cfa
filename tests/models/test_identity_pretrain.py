"""The project's own identity encoder learns the synthetic identities (no downloads needed)."""

from __future__ import annotations

import json

import torch

from ffjobs.cli import main
from ffjobs.models import ModelConfig
from ffjobs.models.identity import build_identity_encoder
from ffjobs.models.identity_pretrain import train_identity_encoder
from ffjobs.models.iresnet import iresnet


def test_pretraining_beats_chance_on_heldout_images(identity_dataset, tmp_path):
    out = tmp_path / "identity.pt"
    cfg = ModelConfig(identity_input_size=32)  # 4x cheaper than the local default of 64 px
    result = train_identity_encoder(cfg, identity_dataset, out, steps=40)

    assert result.identities == 12 and result.heldout_images == 24
    assert result.heldout_accuracy > 4 * result.chance_accuracy
    assert result.heldout_same_identity_cosine > result.heldout_other_identity_cosine + 0.2
    # the file is a plain state_dict the fusion trainer loads with weights_only=True
    state = torch.load(out, weights_only=True)
    assert "fc.weight" in state and "layer4.1.bn3.running_var" in state
    encoder = build_identity_encoder(ModelConfig(identity_input_size=32, identity_weights=str(out)))
    reference = iresnet("iresnet18", width=0.25, input_size=32, embedding_dim=128)
    reference.load_state_dict(state)
    images = torch.rand(3, 3, 32, 32) * 2 - 1
    torch.testing.assert_close(encoder(images), reference.eval()(images), rtol=1e-4, atol=1e-4)


def test_cli_train_identity_prints_one_json_object(identity_dataset, tmp_path, capsys):
    out = tmp_path / "cli.pt"
    code = main(
        [
            "models",
            "train-identity",
            "--data",
            str(identity_dataset),
            "--out",
            str(out),
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out"] == str(out) and report["steps"] == 2 and out.exists()


def test_cli_missing_dataset_is_a_one_line_usage_error(tmp_path, capsys):
    code = main(
        [
            "models",
            "train-identity",
            "--data",
            str(tmp_path / "nope"),
            "--out",
            str(tmp_path / "x.pt"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "nope" in err and "Traceback" not in err
