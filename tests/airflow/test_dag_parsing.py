"""The ``ffjobs_pipeline`` DAG parses cleanly and fast: no import errors, the Params the UI
form shows, validate -> compare_inputs -> preflight -> train -> evaluate -> register -> review,
and no torch/numpy/PIL/MLflow on the parse path.

Parsing runs in a subprocess with its own AIRFLOW_HOME, so Airflow's settings and logging do
not leak into other tests, and ``sys.modules`` shows exactly what parsing imported.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from dag_parse import parse_dags

REPO = Path(__file__).resolve().parents[2]

PARSE = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=sys.argv[1])
    heavy = sorted(m for m in ("torch", "numpy", "PIL", "mlflow") if m in sys.modules)
    dag = bag.dags["ffjobs_pipeline"]

    from ffjobs.airflow import tasks, trigger_conf
    from airflow.sdk.exceptions import AirflowFailException

    try:
        tasks.config_from_params({"config": "local", "overrides": ["train.no_such_key=1"]})
        config_error = None
    except AirflowFailException as exc:
        config_error = str(exc)
    print(json.dumps({
        "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "dag_ids": sorted(bag.dags),
        "schedule": str(dag.schedule),
        "tasks": [t.task_id for t in dag.topological_sort()],
        "downstream": {t: sorted(dag.get_task(t).downstream_task_ids) for t in dag.task_ids},
        "params": {k: {"default": v.value, "schema": v.schema} for k, v in dag.params.items()},
        "retries": {t.task_id: t.retries for t in dag.tasks},
        "heavy_imports": heavy,
        "review": {
            "retries": dag.get_task("review").retries,
            "options": dag.get_task("review").options,
            "params": sorted(dag.get_task("review").serialized_params),
            "trigger_rule": dag.get_task("review").trigger_rule.value,
        },
        "param_overrides": trigger_conf.PARAM_OVERRIDES,
        "sets": trigger_conf.check_trigger_conf({
            "config": "local", "train_steps": 7, "train_lr": 0.0003, "data_source": "s3://b/p",
            "slurm_nodes": None, "nproc": 2, "overrides": ["train.batch_size=16"],
        })[1],
        "config": tasks.config_from_params({
            "train_steps": 7, "data_source": "s3://b/p", "overrides": ["train.batch_size=16"],
        }).to_dict(),
        "config_error": config_error,
    }))
    """
)


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return parse_dags(PARSE, tmp_path_factory.mktemp("airflow-home"))


def test_dag_folder_parses_without_errors(parsed):
    assert parsed["import_errors"] == {}
    assert parsed["dag_ids"] == ["ffjobs_pipeline"]
    assert parsed["schedule"] == "None"


def test_tasks_run_validate_preflight_train_evaluate_register_review(parsed):
    stages = ["validate", "compare_inputs", "preflight", "train", "evaluate", "register", "review"]
    assert parsed["tasks"] == stages
    assert parsed["downstream"] == {
        "validate": ["compare_inputs"],
        "compare_inputs": ["preflight"],  # a scheduled run on unchanged inputs stops here
        "preflight": ["evaluate", "train"],  # evaluate reads the run from preflight's XCom
        "train": ["evaluate"],
        "evaluate": ["register"],
        "register": ["review"],
        "review": [],
    }
    assert parsed["review"] == {
        "retries": 0,  # a new try would ask the question again
        "options": ["Approve", "Reject"],
        "params": ["reason"],
        "trigger_rule": "all_success",  # skipped when nothing was registered
    }


def test_the_slurm_tasks_and_register_have_a_retry(parsed):
    # preflight and train: a retry reads the SLURM job its failed try left (the race of Airflow
    # 3.3's scheduler with a trigger that fires within seconds fails such a try); register: a
    # registry outage; review: none (a new try would ask the question again)
    retried = {task: n for task, n in parsed["retries"].items() if n}
    assert retried == {"preflight": 1, "train": 1, "register": 1}


def test_parsing_imports_no_torch_numpy_pil_or_mlflow(parsed):
    assert parsed["heavy_imports"] == []


def test_params_are_typed_with_defaults_for_the_trigger_form(parsed):
    params = parsed["params"]
    assert params["config"]["default"] == "local"
    assert params["config"]["schema"]["type"] == "string"
    assert "local" in params["config"]["schema"]["enum"]
    assert params["train_steps"]["schema"]["type"] == ["null", "integer"]
    assert params["train_steps"]["schema"]["allOf"] == [{"minimum": 1}]
    assert params["train_lr"]["schema"]["type"] == ["null", "number"]
    assert params["train_lr"]["schema"]["allOf"] == [{"exclusiveMinimum": 0, "maximum": 1}]
    assert params["data_source"]["schema"]["type"] == ["null", "string"]
    assert params["slurm_nodes"]["schema"]["allOf"] == [{"minimum": 1, "maximum": 1024}]
    # slurm.tasks_per_node's own bound
    assert params["nproc"]["schema"]["allOf"] == [{"minimum": 1}]
    assert params["resume"]["default"] is None
    assert params["force"]["default"] is False
    assert params["overrides"]["default"] == []
    assert params["overrides"]["schema"]["items"]["type"] == "string"
    # empty typed overrides keep the preset's value
    assert all(params[name]["default"] is None for name in parsed["param_overrides"])


def test_every_typed_param_maps_to_a_config_key(parsed):
    typed = set(parsed["params"]) - {"config", "resume", "force", "overrides"}
    assert typed == set(parsed["param_overrides"])


def test_params_become_set_strings_and_a_config(parsed):
    assert parsed["sets"] == [
        "train.steps=7",
        "train.lr=0.0003",
        'data.source="s3://b/p"',
        "slurm.tasks_per_node=2",
        "train.batch_size=16",
    ]
    config = parsed["config"]
    assert config["train"]["steps"] == 7
    assert config["train"]["batch_size"] == 16
    assert config["data"]["source"] == "s3://b/p"
    assert config["name"] == "local"


def test_a_config_mistake_fails_the_task_naming_the_key(parsed):
    assert parsed["config_error"].startswith("config: ")
    assert "train.no_such_key" in parsed["config_error"]
