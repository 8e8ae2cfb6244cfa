"""The deployment's ``configs/schedule.yaml``: cron and/or the dataset's Asset become the DAG's
``schedule=``, its preset and ``force`` the defaults a scheduled run takes; a mistake is the
DAG's import error naming the file, line and key. Parsed by Airflow itself in a subprocess, as
in ``test_dag_parsing.py``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from dag_parse import parse_dags

from ffjobs.airflow.schedule import ScheduleConfig, dag_schedule, load_schedule
from ffjobs.airflow.trigger_conf import check_trigger_conf, config_choices
from ffjobs.config import ConfigError

PARSE = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=sys.argv[1])
    dag = bag.dags.get("ffjobs_pipeline")
    print(json.dumps({
        "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "timetable": dag and type(dag.timetable).__name__,
        "cron": dag and dag.timetable.timetable.expression,
        "asset": dag and dag.timetable.asset_condition.uri,
        "config_default": dag and dag.params["config"],
        "force_default": dag and dag.params["force"],
        "tasks": dag and [t.task_id for t in dag.topological_sort()],
    }))
    """
)


def write_schedule(workdir: Path, text: str) -> Path:
    path = workdir / "configs" / "schedule.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_no_file_or_an_empty_one_is_no_schedule(tmp_path):
    assert load_schedule(tmp_path) == ScheduleConfig()
    assert dag_schedule(load_schedule(tmp_path)) is None
    write_schedule(tmp_path, "")
    assert not load_schedule(tmp_path).enabled
    assert dag_schedule(load_schedule(tmp_path)) is None


def test_cron_dataset_or_both():
    from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable

    cron = dag_schedule(ScheduleConfig(cron="0 3 * * *"))
    assert isinstance(cron, CronTriggerTimetable)
    assert dag_schedule(ScheduleConfig(dataset="s3://faces/train")) == [Asset("s3://faces/train")]
    both = dag_schedule(ScheduleConfig(cron="@daily", dataset="s3://faces/train"))
    assert isinstance(both, AssetOrTimeSchedule)


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("cron: '61 3 * * *'\n", "schedule.yaml:1: cron: ", "not a cron expression: '61 3 * * *'"),
        ("cron: '@daily'\nevery: 3\n", "schedule.yaml:2: every: ", "unknown key; allowed here"),
        ("dataset: 5\n", "schedule.yaml:1: dataset: ", "expected a string or null"),
        ("cron: '@daily'\nforce: sure\n", "schedule.yaml:2: force: ", "expected a boolean"),
        ("cron: '@daily'\nconfig: nosuch\n", "schedule.yaml: config: ", "no such preset 'nosuch'"),
        ("config: local\n", "schedule.yaml: ", "set cron, dataset or both"),
    ],
)
def test_a_mistake_names_the_file_line_and_key(tmp_path, text, where, what):
    write_schedule(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_schedule(tmp_path)
    message = str(error.value)
    assert message.startswith(str(tmp_path / "configs" / where)), message
    assert what in message


def test_the_schedule_is_not_a_preset(tmp_path):
    write_schedule(tmp_path, "cron: '@daily'\n")
    (tmp_path / "configs" / "nightly.yaml").write_text("extends: local\n")
    assert "schedule" not in config_choices(tmp_path)
    assert load_schedule(tmp_path) == ScheduleConfig(cron="@daily")
    write_schedule(tmp_path, "cron: '@daily'\nconfig: nightly\n")
    assert load_schedule(tmp_path).config == "nightly"
    with pytest.raises(ConfigError, match="no such preset"):
        check_trigger_conf({"config": "schedule"}, tmp_path)


def test_airflow_parses_the_scheduled_dag_with_its_defaults(tmp_path):
    write_schedule(
        tmp_path,
        """
        cron: "0 3 * * *"
        dataset: s3://faces/train
        config: nightly
        force: true
        """,
    )
    (tmp_path / "configs" / "nightly.yaml").write_text("extends: local\n")
    parsed = parse_dags(PARSE, tmp_path / "home", cwd=tmp_path)
    assert parsed["import_errors"] == {}
    assert parsed["timetable"] == "AssetOrTimeSchedule"
    assert (parsed["cron"], parsed["asset"]) == ("0 3 * * *", "s3://faces/train")
    # a scheduled run takes the Params' defaults: the schedule's preset and force
    assert parsed["config_default"] == "nightly"
    assert parsed["force_default"] is True
    assert parsed["tasks"][:3] == ["validate", "compare_inputs", "preflight"]


def test_a_bad_schedule_file_is_the_dags_import_error(tmp_path):
    write_schedule(tmp_path, "cron: every night\n")
    parsed = parse_dags(PARSE, tmp_path / "home", cwd=tmp_path)
    (error,) = parsed["import_errors"].values()
    assert f"{tmp_path / 'configs' / 'schedule.yaml'}:1: cron: not a cron expression" in error
    assert parsed["timetable"] is None
