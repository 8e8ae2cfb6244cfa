"""The DAG's typed Params take their ranges from the config's field metadata, so the trigger form
refuses what the config would refuse and nothing is written down twice.

The DAG is parsed in a subprocess with its own AIRFLOW_HOME, as in ``test_dag_parsing.py``.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
from dag_parse import parse_dags

from ffjobs.config import param_schema
from ffjobs.slurm.config import SlurmConfig
from ffjobs.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]

PARSE = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import ParamValidationError

    dag = DagBag(dag_folder=sys.argv[1]).dags["ffjobs_pipeline"]

    def accepts(name, value):
        try:
            dag.params.get_param(name).resolve(value)
            return True
        except ParamValidationError:
            return False

    print(json.dumps({
        "schemas": {k: v.schema for k, v in dag.params.items()},
        "accepts": {
            "train_steps": [accepts("train_steps", v) for v in (None, 1, 0)],
            "train_lr": [accepts("train_lr", v) for v in (None, 3e-4, 0.0, 1.5)],
            "slurm_nodes": [accepts("slurm_nodes", v) for v in (None, 2, 0)],
        },
    }))
    """
)

TYPED = {"train_steps": "train.steps", "train_lr": "train.lr", "slurm_nodes": "slurm.nodes"}


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return parse_dags(PARSE, tmp_path_factory.mktemp("airflow-home"))


def _metadata(cls: type, name: str) -> dict:
    return dict(next(f for f in dataclasses.fields(cls) if f.name == name).metadata)


def test_typed_params_carry_the_config_fields_bounds(parsed):
    schemas = parsed["schemas"]
    assert schemas["train_steps"]["minimum"] == _metadata(TrainConfig, "steps")["ge"]
    assert schemas["train_lr"]["exclusiveMinimum"] == _metadata(TrainConfig, "lr")["gt"]
    assert schemas["train_lr"]["maximum"] == _metadata(TrainConfig, "lr")["le"]
    assert schemas["slurm_nodes"]["minimum"] == _metadata(SlurmConfig, "nodes")["ge"]


def test_typed_params_are_the_param_schema_plus_a_title(parsed):
    for name, key in TYPED.items():
        schema = dict(parsed["schemas"][name])
        assert schema.pop("title") == key
        assert schema == param_schema(key, nullable=True)


def test_the_form_refuses_what_the_config_refuses_and_empty_keeps_the_preset(parsed):
    assert parsed["accepts"] == {
        "train_steps": [True, True, False],
        "train_lr": [True, True, False, False],
        "slurm_nodes": [True, True, False],
    }


CONFIG_PARAM = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import ParamValidationError

    dag = DagBag(dag_folder=sys.argv[1]).dags["ffjobs_pipeline"]
    values = ["local", "clusters/minicluster", "team/mine.yaml", "/etc/shadow", "../x",
              "a/../../b", "~root/x"]
    accepted = {}
    for value in values:
        try:
            dag.params.get_param("config").resolve(value)
            accepted[value] = True
        except ParamValidationError:
            accepted[value] = False
    print(json.dumps({"accepted": accepted,
                      "examples": dag.params.get_param("config").schema.get("examples"),
                      "nodes_max": dag.params.get_param("slurm_nodes").schema.get("maximum")}))
    """
)


def test_the_config_param_takes_presets_and_relative_paths_only(tmp_path):
    from ffjobs.airflow.trigger_conf import preset_names

    parsed = parse_dags(CONFIG_PARAM, tmp_path / "home")
    assert parsed["accepted"] == {
        "local": True,
        "clusters/minicluster": True,
        "team/mine.yaml": True,  # shape only: the api-server's check looks inside configs/
        "/etc/shadow": False,
        "../x": False,
        "a/../../b": False,
        "~root/x": False,
    }
    assert parsed["examples"] == preset_names()
    assert parsed["nodes_max"] == _metadata(SlurmConfig, "nodes")["le"]
