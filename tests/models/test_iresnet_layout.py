"""The identity encoder loads arcface_torch weights: same state_dict keys, order and shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from model_test_helpers import well_conditioned

from ffjobs.models import ModelConfig
from ffjobs.models.identity import IdentityWeightsError, build_identity_encoder
from ffjobs.models.iresnet import iresnet

REFERENCE = Path(__file__).resolve().parent / "data" / "arcface_iresnet_keys.json"


@pytest.mark.parametrize("arch", ["iresnet50", "iresnet100"])
def test_state_dict_matches_arcface_torch_layout(arch):
    expected = [(name, list(shape)) for name, shape in json.loads(REFERENCE.read_text())[arch]]
    with torch.device("meta"):
        model = iresnet(arch)
    actual = [(name, list(t.shape)) for name, t in model.state_dict().items()]
    assert actual == expected


def _arcface_cfg(tmp_path: Path, **changes) -> ModelConfig:
    fields = dict(
        identity_arch="iresnet18", identity_width=1.0, identity_input_size=112, identity_dim=512
    )
    fields.update(changes)
    return ModelConfig(**fields)


def test_loads_a_released_style_file_with_weights_only(tmp_path):
    cfg = _arcface_cfg(tmp_path)
    source = well_conditioned(iresnet("iresnet18"))
    path = tmp_path / "backbone.pth"
    # released files carry no num_batches_tracked on some exports and may come from DDP
    state = {
        f"module.{k}": v
        for k, v in source.state_dict().items()
        if not k.endswith("num_batches_tracked")
    }
    torch.save(state, path)
    encoder = build_identity_encoder(ModelConfig(**{**cfg.__dict__, "identity_weights": str(path)}))
    images = torch.rand(2, 3, 112, 112) * 2 - 1
    torch.testing.assert_close(encoder(images), source.eval()(images), rtol=1e-3, atol=1e-4)


def test_layout_mismatch_names_missing_unexpected_keys_and_file(tmp_path):
    state = iresnet("iresnet18").state_dict()
    state["head.weight"] = torch.zeros(3)
    del state["layer2.0.conv1.weight"]
    path = tmp_path / "wrong.pth"
    torch.save(state, path)
    with pytest.raises(IdentityWeightsError) as error:
        build_identity_encoder(_arcface_cfg(tmp_path, identity_weights=str(path)))
    message = str(error.value)
    assert str(path) in message and "iresnet18" in message
    assert "missing keys: layer2.0.conv1.weight;" in message
    assert "unexpected keys: head.weight;" in message
    assert "\n" not in message

    with pytest.raises(IdentityWeightsError, match=r"missing keys: layer1\.2\..*\(\+\d+ more\)"):
        build_identity_encoder(
            _arcface_cfg(tmp_path, identity_arch="iresnet34", identity_weights=str(path))
        )


def test_shape_mismatch_is_reported_with_both_shapes(tmp_path):
    path = tmp_path / "narrow.pth"
    torch.save(
        iresnet("iresnet18", width=0.25, input_size=64, embedding_dim=128).state_dict(), path
    )
    with pytest.raises(
        IdentityWeightsError,
        match=r"conv1\.weight \(file \[16, 3, 3, 3\], model "
        r"\[64, 3, 3, 3\]\)",
    ):
        build_identity_encoder(_arcface_cfg(tmp_path, identity_weights=str(path)))


def test_pickled_objects_are_refused_not_executed(tmp_path):
    path = tmp_path / "model.pth"
    torch.save(iresnet("iresnet18", width=0.25, input_size=64), path)  # a whole module, pickled
    with pytest.raises(IdentityWeightsError, match="weights_only=True"):
        build_identity_encoder(ModelConfig(identity_weights=str(path)))


def test_missing_file_says_how_to_make_one(tmp_path):
    path = tmp_path / "absent.pt"
    with pytest.raises(IdentityWeightsError, match="ffjobs models train-identity"):
        build_identity_encoder(ModelConfig(identity_weights=str(path)))
