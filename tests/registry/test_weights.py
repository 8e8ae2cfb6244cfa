"""A registered model's files as ffjobs writes and reads them: weights and a recorded config,
read back bit for bit, and a planted pickle refused in one line without running."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

from ffjobs.config import load_config
from ffjobs.errors import UserError
from ffjobs.models.swap import build_face_swap
from ffjobs.registry.weights import CONFIG_FILE, WEIGHTS_FILE, read_face_swap, save_face_swap


class PlantedPayload:
    """Unpickling it creates ``marker``: the proof that a loader ran a planted file's code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def plant_pickle(path, marker) -> None:
    """Replace ``path`` with a pickle whose loading would create ``marker``."""
    path.write_bytes(pickle.dumps(PlantedPayload(str(marker))))


@pytest.fixture
def model_folder(tmp_path):
    config = load_config("local").model
    model = build_face_swap(config)
    save_face_swap(model, config, tmp_path / "model")
    return model, tmp_path / "model"


def test_weights_and_config_read_back_to_the_same_model(model_folder):
    model, folder = model_folder
    assert sorted(p.name for p in folder.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    loaded = read_face_swap(folder, "models:/m/1")
    images = torch.rand(2, 3, model.resolution, model.resolution) * 2 - 1
    # the same weights in the same module on the same CPU: the same bits, not merely close
    assert torch.equal(loaded(images, images.flip(0)), model(images, images.flip(0)))
    assert loaded.resolution == model.resolution
    before = torch.random.get_rng_state()
    read_face_swap(folder, "models:/m/1")
    assert torch.equal(torch.random.get_rng_state(), before)  # loading draws no random numbers


@pytest.mark.parametrize("planted", [WEIGHTS_FILE, CONFIG_FILE])
def test_a_planted_pickle_is_refused_by_name_and_never_runs(model_folder, tmp_path, planted):
    _, folder = model_folder
    marker = tmp_path / "code-ran"
    plant_pickle(folder / planted, marker)
    with pytest.raises(UserError) as refused:
        read_face_swap(folder, "models:/m@champion")
    message = str(refused.value)
    assert message.startswith(f"models:/m@champion {planted}: ") and "\n" not in message
    assert "weights_only=False" not in message  # no advice to run the file after all
    assert not marker.exists()


def test_a_pickled_tensor_dict_with_code_inside_is_refused(model_folder, tmp_path):
    _, folder = model_folder
    marker = tmp_path / "code-ran"
    torch.save({"generator.stem.weight": PlantedPayload(str(marker))}, folder / WEIGHTS_FILE)
    with pytest.raises(UserError, match=rf"{WEIGHTS_FILE}: refused, not plain tensors"):
        read_face_swap(folder, "models:/m/1")
    assert not marker.exists()


def test_a_config_or_weights_that_do_not_fit_are_named(model_folder):
    _, folder = model_folder
    recorded = json.loads((folder / CONFIG_FILE).read_text())
    (folder / CONFIG_FILE).write_text(json.dumps({**recorded, "width": 16}))
    with pytest.raises(UserError, match=rf"{WEIGHTS_FILE}: does not fit .* \(shape of "):
        read_face_swap(folder, "models:/m/1")
    (folder / CONFIG_FILE).write_text(json.dumps({**recorded, "run_this": "import os"}))
    with pytest.raises(UserError, match=rf"{CONFIG_FILE}: model.run_this: unknown key"):
        read_face_swap(folder, "models:/m/1")
    (folder / CONFIG_FILE).unlink()
    with pytest.raises(UserError, match=rf"{CONFIG_FILE}: missing; not a model ffjobs"):
        read_face_swap(folder, "models:/m/1")
