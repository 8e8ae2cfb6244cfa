"""The encoders ffjobs pre-trains learn the training identities only, and are keyed to what
made them: a changed dataset, split or setting never reuses a stale one silently."""

from __future__ import annotations

import json
import shutil

import pytest

from ffjobs.config import load_config
from ffjobs.data.index import index_from_config, split_identities
from ffjobs.errors import UserError
from ffjobs.models.prepare import encoder_record, ensure_identity_weights
from ffjobs.quality.encoder import ensure_evaluation_encoder

STEPS = 3  # what is checked is which identities and which record, not how well it learns


@pytest.fixture
def config(identity_dataset, tmp_path):
    data = tmp_path / "faces"
    shutil.copytree(identity_dataset, data)
    return load_config(
        "local",
        [
            f"data.source={data}",
            f"model.identity_weights={tmp_path / 'identity.pt'}",
            "model.identity_input_size=32",
        ],
    )


def test_the_encoder_learns_the_training_identities_only(config):
    result = ensure_identity_weights(config, steps=STEPS)
    index = index_from_config(config.data)
    train, held_out = split_identities(index, config.data.val_fraction, config.data.synth.seed)
    assert result is not None and result.identities == len(train.identities) == 10
    assert len(held_out.identities) == 2  # 12 identities, val_fraction 0.2
    record = json.loads(encoder_record(config.model.identity_weights).read_text())
    assert record["training_identities"] == 10 and record["fingerprint"] == train.fingerprint
    assert record["arch"] == "iresnet18" and record["input_size"] == 32
    assert ensure_identity_weights(config, steps=STEPS) is None  # made from the same: reused


def test_a_changed_dataset_makes_the_encoder_again_and_says_why(config, capsys):
    from pathlib import Path

    ensure_identity_weights(config, steps=STEPS)
    weights = Path(config.model.identity_weights)
    first = weights.read_bytes()
    # one more image of a training identity: another fingerprint of the training identities
    index = index_from_config(config.data)
    train, _ = split_identities(index, config.data.val_fraction, config.data.synth.seed)
    folder = Path(config.data.source) / train.identities[0]
    image = sorted(folder.iterdir())[0]
    shutil.copyfile(image, folder / f"extra{image.suffix}")
    capsys.readouterr()
    result = ensure_identity_weights(config, steps=STEPS)
    assert result is not None
    said = capsys.readouterr().err
    assert f"{weights} is stale" in said and "pre-training it again" in said
    assert weights.read_bytes() != first
    assert not [p for p in weights.parent.iterdir() if p.name.endswith((".tmp", ".old"))]


def test_a_file_without_a_record_is_the_users_and_is_used_as_it_is(config):
    from pathlib import Path

    weights = Path(config.model.identity_weights)
    weights.write_bytes(b"the user's weights")
    assert ensure_identity_weights(config, steps=STEPS) is None
    assert weights.read_bytes() == b"the user's weights"


def test_the_evaluation_encoder_at_its_default_path_without_a_record_is_made_again(
    config, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # the default path is relative: runs/models/identity-eval.pt
    weights = tmp_path / config.evaluate.identity_weights
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"made before records existed, maybe from the held-out identities")
    monkeypatch.setattr("ffjobs.quality.encoder.PRETRAIN_STEPS", STEPS)
    ensure_evaluation_encoder(config)
    assert "no record of what made it" in capsys.readouterr().err
    record = json.loads(encoder_record(weights).read_text())
    assert record["training_identities"] == 10 and record["arch"] == "iresnet34"


def test_a_synthetic_set_made_with_other_settings_is_refused(tmp_path):
    from ffjobs.data.synth import ensure_dataset

    out = tmp_path / "synthetic"
    ensure_dataset(out, identities=3, per_identity=2, size=32, seed=0)
    with pytest.raises(UserError) as refused:
        ensure_dataset(out, identities=4, per_identity=2, size=32, seed=0)
    message = str(refused.value)
    assert "identities=3" in message and "identities=4" in message and f"Remove {out}" in message
    assert len(list(out.glob("*/*.jpg"))) == 6  # nothing of the old set lost
