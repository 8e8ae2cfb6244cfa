"""A real Airflow api-server (with the ffjobs plugin from the package's entry point) refuses a
bad ``ffjobs_pipeline`` conf with HTTP 400 naming the field, before any DAG run exists, and no
file's content reaches a log; a good conf still makes a DAG run.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from airflow_stack import DAG_ID, AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARKER = "root:MARKER-c0nf-leak:19000:0:99999:7:::"
RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"


@pytest.fixture(scope="module")
def deployment(airflow_api: AirflowStack) -> AirflowStack:
    """The stack's working folder with a configs/ file of its own and, outside configs/, a file
    whose first line must never be read into a log (a stand-in for /etc/shadow that exists)."""
    configs = airflow_api.workdir / "configs"
    configs.mkdir(exist_ok=True)
    (configs / "mine.yaml").write_text("extends: local\nname: mine\n")
    (airflow_api.workdir / "private.txt").write_text(MARKER + "\n")
    # the form's preset choice lists configs/ as the DAG is parsed: "mine" after a re-parse
    airflow_api.reparse_dag(lambda dag: "mine" in dag["params"]["config"]["schema"]["enum"])
    return airflow_api


def trigger(stack: AirflowStack, conf: dict) -> tuple[int, object]:
    return stack.post(RUNS, {"logical_date": None, "conf": conf})


def dag_runs(stack: AirflowStack) -> list:
    status, body = stack.get(RUNS)
    assert status == 200, body
    return body["dag_runs"]


def bad_confs(workdir: Path) -> list[tuple[dict, str]]:
    return [
        ({"config": "/etc/shadow"}, "config"),
        ({"config": str(workdir / "private.txt")}, "config"),
        ({"config": "../private.txt"}, "config"),
        ({"config": "no-such-preset"}, "config"),
        ({"overrides": ["runs_dir=../../x"]}, "overrides[0]"),
        ({"overrides": ["train.lr=5"]}, "overrides[0]"),
        ({"overrides": ["train.no_such_key=1"]}, "overrides[0]"),
        ({"slurm_nodes": 10000}, "slurm_nodes"),
        ({"slurm_nodes": -1}, "slurm_nodes"),
        ({"train_steps": "five"}, "train_steps"),
        ({"force": "yes"}, "force"),
        ({"data_source": "/etc"}, "data_source"),
        ({"no_such_field": 1}, "no_such_field"),
    ]


def test_bad_confs_are_refused_before_a_dag_run_exists(deployment):
    assert dag_runs(deployment) == []
    for conf, field in bad_confs(deployment.workdir):
        status, body = trigger(deployment, conf)
        assert status == 400, (conf, status, body)
        # the plugin's one-line answer: "conf: <field>: <what is wrong>"
        assert body["detail"].startswith(f"conf: {field}: "), (conf, body)
        assert MARKER not in str(body)
    assert dag_runs(deployment) == []


def test_a_conf_only_the_dags_own_schema_refuses_is_refused_naming_the_param(deployment):
    """``local.yaml`` is a file the plugin's check finds, but not one of the form's choices
    (names): Airflow's own Param check answers 400 naming the Param, and no DAG run exists."""
    before = dag_runs(deployment)
    status, body = trigger(deployment, {"config": "local.yaml"})
    assert status == 400, body
    assert "Invalid input for param config: 'local.yaml' is not one of" in body["detail"], body
    assert dag_runs(deployment) == before


def test_no_file_content_reaches_any_log(deployment):
    for conf, _ in bad_confs(deployment.workdir):
        trigger(deployment, conf)
    logs = deployment.all_logs()
    assert logs  # the components wrote their output where all_logs looks
    assert "MARKER-c0nf-leak" not in logs
    assert "root:" not in logs  # /etc/shadow's first line, had it been read


def test_a_good_conf_still_makes_a_dag_run(deployment):
    conf = {"config": "mine", "train_steps": 4, "overrides": ["runs_dir=runs/ok"]}
    status, body = trigger(deployment, conf)
    assert status == 200 or status == 201, body
    assert body["conf"] == conf
    try:
        assert [run["dag_run_id"] for run in dag_runs(deployment)] == [body["dag_run_id"]]
    finally:
        deleted, _ = deployment.delete(f"{RUNS}/{body['dag_run_id']}")
        assert deleted == 204
    assert dag_runs(deployment) == []


def test_a_run_made_around_the_api_server_stops_in_its_first_task(airflow_stack):
    """``airflow dags trigger`` writes the run straight into the database, so only the DAG's own
    Param schemas apply (they pass this conf); the validate task refuses it, naming the field,
    and nothing after it runs. Needs all four components: the run really executes."""
    import subprocess

    conf = '{"overrides": ["runs_dir=../../escaped"]}'
    made = subprocess.run(
        [airflow_stack._airflow(), "dags", "trigger", DAG_ID, "--conf", conf],
        env=airflow_stack.env,
        cwd=airflow_stack.workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    (run,) = dag_runs(airflow_stack)
    assert airflow_stack.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    run_path = f"{RUNS}/{run['dag_run_id']}"
    # A task start spawns a fresh interpreter that imports Airflow and ffjobs: tens of seconds
    # on a busy two-core machine; five minutes bounds a hang, not the expected time.
    deadline = time.monotonic() + 300
    while airflow_stack.get(run_path)[1]["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, "the DAG run did not finish"
        time.sleep(2)
    states = {
        ti["task_id"]: ti["state"]
        for ti in airflow_stack.get(f"{run_path}/taskInstances")[1]["task_instances"]
    }
    assert airflow_stack.get(run_path)[1]["state"] == "failed"
    assert states["validate"] == "failed"
    assert states["preflight"] in ("upstream_failed", None)
    assert "conf: overrides[0]: must be a relative path" in airflow_stack.all_logs()
    assert not (airflow_stack.workdir.parent.parent / "escaped").exists()
