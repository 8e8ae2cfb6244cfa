"""The DAG's trigger form (``ffjobs.airflow.form``): sections in order, the preset a labelled
choice of the shipped presets and the deployment's configs, and each typed field with the
config field's own bounds, in words with its unit, and each preset's value, so the form refuses
what the config refuses and nothing is written down twice.

The DAG is parsed in a subprocess with its own AIRFLOW_HOME, in a deployment's working folder,
as in ``test_dag_parsing.py``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from dag_parse import parse_dags

from ffjobs.airflow.form import ADVANCED, HOW_LONG, RESUME, SECTIONS, WHAT, WHERE
from ffjobs.airflow.trigger_conf import CONF_FIELDS, PARAM_OVERRIDES, preset_names
from ffjobs.config import load_config
from ffjobs.config.schema import param_schema

PARSE = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import ParamValidationError

    bag = DagBag(dag_folder=sys.argv[1])
    dag = bag.dags["ffjobs_pipeline"]

    def accepts(name, value):
        try:
            dag.params.get_param(name).resolve(value)
            return True
        except ParamValidationError:
            return False

    print(json.dumps({
        "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "names": list(dag.params),
        "defaults": {k: v.value for k, v in dag.params.items()},
        "schemas": {k: v.schema for k, v in dag.params.items()},
        "descriptions": {k: v.description for k, v in dag.params.items()},
        "accepts": {
            "train_steps": [accepts("train_steps", v) for v in (None, 1, 0, "five")],
            "train_lr": [accepts("train_lr", v) for v in (None, 3e-4, 0.0, 1.5)],
            "slurm_nodes": [accepts("slurm_nodes", v) for v in (None, 2, 0, -1, 1024, 10000)],
            "config": {v: accepts("config", v) for v in (
                "local", "clusters/minicluster", "mine", "team/gpu", "team/gpu.yaml",
                "/etc/shadow", "../x", "no-such-preset")},
            "force": [accepts("force", v) for v in (None, True, False, "yes")],
            "overrides": [accepts("overrides", v) for v in (None, [], ["train.lr=0.1"])],
        },
    }))
    """
)

SECTION_OF = {
    "config": WHAT,
    "data_source": WHAT,
    "force": WHAT,
    "slurm_nodes": WHERE,
    "nproc": WHERE,
    "train_steps": HOW_LONG,
    "train_lr": HOW_LONG,
    "resume": RESUME,
    "overrides": ADVANCED,
}
BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
SECRET = "S3CRETformKEY"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder whose configs/ holds a config of its own, one in a subfolder and one
    the typed config refuses."""
    workdir = tmp_path_factory.mktemp("deployment")
    (workdir / "configs" / "team").mkdir(parents=True)
    (workdir / "configs" / "mine.yaml").write_text("extends: local\nname: mine\n")
    (workdir / "configs" / "team" / "gpu.yaml").write_text("extends: train-256\nname: gpu\n")
    (workdir / "configs" / "broken.yaml").write_text("extends: local\ntrain: {steps: 0}\n")
    (workdir / "configs" / "remote.yaml").write_text(
        f"extends: local\ndata: {{source: 's3://faces/v2?api_key={SECRET}'}}\n"
    )
    return workdir


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory, deployment: Path) -> dict:
    return parse_dags(PARSE, tmp_path_factory.mktemp("airflow-home"), cwd=deployment)


def preset_values(description: str) -> dict[str, str]:
    """``{preset: value}`` from a description's "Empty keeps the preset's value: 200 in local,
    clusters/minicluster; 100000 in train-256" (or "X in every preset")."""
    listed = description.split("Empty keeps the preset's value: ", 1)[1].rstrip(".")
    values = {}
    for group in listed.split("; "):
        value, _, names = group.rpartition(" in ")
        for name in names.split(", "):
            values[name] = value
    return values


def test_the_dag_parses_in_a_deployment_whose_config_is_broken(parsed):
    assert parsed["import_errors"] == {}
    assert set(parsed["names"]) == set(CONF_FIELDS)


def test_the_sections_come_in_order_and_hold_their_fields(parsed):
    sections = {name: schema["section"] for name, schema in parsed["schemas"].items()}
    assert sections == SECTION_OF
    assert list(dict.fromkeys(sections[name] for name in parsed["names"])) == list(SECTIONS)


def test_each_typed_param_is_its_config_fields_schema_with_the_bounds_under_allof(parsed):
    """Airflow's number box clamps to a top-level minimum/maximum without a word; under allOf
    the same bounds still refuse (JSON schema, the REST check), so the form can say so."""
    for name, key in PARAM_OVERRIDES.items():
        schema = dict(parsed["schemas"][name])
        assert not set(schema) & set(BOUNDS), name
        for shown in ("title", "section"):
            schema.pop(shown)
        for bounds in schema.pop("allOf", []):
            schema.update(bounds)
        assert schema == param_schema(key, nullable=True), name
        assert parsed["defaults"][name] is None  # empty keeps the preset's value


def test_the_form_refuses_what_the_config_refuses_and_empty_keeps_the_preset(parsed):
    accepts = parsed["accepts"]
    assert accepts["train_steps"] == [True, True, False, False]
    assert accepts["train_lr"] == [True, True, False, False]
    assert accepts["slurm_nodes"] == [True, True, False, False, True, False]


def test_descriptions_give_the_bounds_with_their_unit_and_each_presets_value(parsed, deployment):
    descriptions = parsed["descriptions"]
    assert "(train.steps): 1 or more steps." in descriptions["train_steps"]
    assert "(train.lr): more than 0 and at most 1." in descriptions["train_lr"]
    assert "(slurm.nodes): 1 to 1024 nodes." in descriptions["slurm_nodes"]
    assert "(slurm.tasks_per_node): 1 or more GPUs per node." in descriptions["nproc"]
    loaded = {
        name: load_config(deployment / "configs" / f"{name}.yaml") for name in ("mine", "team/gpu")
    } | {name: load_config(name) for name in preset_names()}
    for name, key in PARAM_OVERRIDES.items():
        values = preset_values(descriptions[name])
        if set(values) == {"every preset"}:
            values = dict.fromkeys(loaded, values["every preset"])
        assert "broken" not in values  # it does not load: it has no values to show
        for preset, config in loaded.items():
            value = config
            for part in key.split("."):
                value = getattr(value, part)
            assert values[preset] == str(value), (name, preset)


def test_the_preset_is_a_labelled_choice_of_the_presets_and_the_deployments_configs(parsed):
    schema = parsed["schemas"]["config"]
    assert parsed["defaults"]["config"] == "local"
    assert schema["enum"] == sorted({*preset_names(), "mine", "team/gpu", "broken", "remote"})
    labels = schema["values_display"]
    assert set(labels) == set(schema["enum"])
    local = load_config("local")
    assert labels["local"].startswith(
        f"local: {local.model.resolution} px, {local.train.steps} steps, this machine"
    )
    minicluster = load_config("clusters/minicluster").slurm
    assert (
        f"SLURM {minicluster.partition}, {minicluster.nodes} nodes"
        in (labels["clusters/minicluster"])
    )
    # the key to look at, not the message, which may quote a value
    assert labels["broken"] == "broken: does not load (check train.steps)"
    assert parsed["accepts"]["config"] == {
        "local": True,
        "clusters/minicluster": True,
        "mine": True,
        "team/gpu": True,
        "team/gpu.yaml": False,  # the choices are names, as the form lists them
        "/etc/shadow": False,
        "../x": False,
        "no-such-preset": False,
    }


def test_no_secret_of_a_deployments_config_reaches_the_form(parsed):
    """Every viewer of the DAG sees its Params: a preset's value is shown redacted."""
    shown = json.dumps([parsed["schemas"], parsed["descriptions"]])
    assert SECRET not in shown


def test_force_resume_and_overrides_are_optional(parsed):
    for name in ("force", "resume", "overrides"):
        assert "null" in parsed["schemas"][name]["type"], name  # not marked required
    assert parsed["defaults"]["force"] is False
    assert parsed["accepts"]["force"] == [True, True, True, False]
    assert parsed["defaults"]["overrides"] == []
    assert parsed["accepts"]["overrides"] == [True, True, True]
    assert parsed["defaults"]["resume"] is None
