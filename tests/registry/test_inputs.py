"""Whether a run's inputs (dataset fingerprint, config hash, code version) equal those of the
champion's or the challenger's run: the plain comparison, and the versions read from a real
MLflow store (SQLite) by alias."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ffjobs.config import config_from_dict, load_config
from ffjobs.registry.inputs import (
    ModelInputs,
    code_version,
    config_hash,
    registered_by_alias,
    run_inputs,
    unchanged_since,
)

INPUTS = ModelInputs("ab" * 32, "cd" * 32, "0.1.0@" + "e" * 40)


def version(number: int, inputs: ModelInputs | None = INPUTS, **tags: str) -> SimpleNamespace:
    """A model version as MLflow returns it: its number and tags."""
    return SimpleNamespace(version=str(number), tags={**(inputs.tags() if inputs else {}), **tags})


def test_equal_inputs_name_the_version_and_alias():
    reason = unchanged_since(INPUTS, {"challenger": version(4)})
    assert reason == (
        "inputs unchanged since version 4 (challenger): dataset fingerprint abababababab, "
        f"config cdcdcdcdcdcd, code 0.1.0@{'e' * 40}"
    )


def test_the_champion_is_named_first_when_both_are_equal():
    reason = unchanged_since(INPUTS, {"challenger": version(5), "champion": version(3)})
    assert reason is not None and reason.startswith("inputs unchanged since version 3 (champion)")


@pytest.mark.parametrize("changed", ["dataset_fingerprint", "config_hash", "code_version"])
def test_any_changed_input_trains(changed):
    other = ModelInputs(**{**INPUTS.tags(), changed: "ff" * 32})
    assert unchanged_since(other, {"champion": version(3), "challenger": version(4)}) is None


def test_a_match_on_one_alias_is_enough():
    other = ModelInputs(**{**INPUTS.tags(), "config_hash": "ff" * 32})
    registered = {"champion": version(3, other), "challenger": version(4)}
    assert unchanged_since(INPUTS, registered).startswith("inputs unchanged since version 4")


def test_nothing_registered_trains():
    assert unchanged_since(INPUTS, {}) is None


def test_a_version_without_the_tags_never_matches():
    # registered before versions carried their inputs: only the fingerprint is known
    old = version(1, None, dataset_fingerprint=INPUTS.dataset_fingerprint)
    assert unchanged_since(INPUTS, {"champion": old}) is None
    unknown = ModelInputs("unknown", "unknown", "unknown")
    assert unchanged_since(unknown, {"champion": version(1, unknown)}) is None


def test_run_inputs_of_an_unvalidated_run_never_match():
    config = load_config("local")
    inputs = run_inputs(config, None)
    assert inputs.dataset_fingerprint == "unknown"
    assert unchanged_since(inputs, {"champion": version(1, inputs)}) is None


def test_config_hash_follows_the_resolved_config():
    config = load_config("local")
    # the run directory keeps the config as JSON; read back, it hashes the same
    reloaded = config_from_dict(json.loads(config.dump("json")))
    assert config_hash(reloaded) == config_hash(config)
    assert config_hash(load_config("local", ["train.steps=7"])) != config_hash(config)
    assert len(config_hash(config)) == 64


def test_code_version_is_the_package_version_and_commit():
    from ffjobs import __version__

    version_text, _, commit = code_version().partition("@")
    assert version_text == __version__
    assert commit == "unknown" or len(commit.removesuffix("-dirty")) == 40


def test_registered_by_alias_reads_champion_and_challenger(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert registered_by_alias(client, "faces") == {}  # no such model yet
    client.create_registered_model("faces")
    for number in (1, 2, 3):
        client.create_model_version("faces", f"file://{tmp_path}/m{number}", tags=INPUTS.tags())
    assert registered_by_alias(client, "faces") == {}  # no alias set
    client.set_registered_model_alias("faces", "champion", "1")
    client.set_registered_model_alias("faces", "challenger", "3")
    found = registered_by_alias(client, "faces")
    assert {alias: str(v.version) for alias, v in found.items()} == {
        "champion": "1",
        "challenger": "3",
    }
    assert ModelInputs.from_tags(found["challenger"].tags) == INPUTS
    assert unchanged_since(INPUTS, found).startswith("inputs unchanged since version 1 (champion)")
