"""``dag.test()`` runs the ``ffjobs_pipeline`` DAG end to end against a real Airflow metadata
database (SQLite, migrated once per session): five tasks, one run directory, one MLflow run
with every stage's tag and a registered challenger; a model the gate blocks skips register and
the DAG run succeeds, its tasks handing on the note's line (the scheduler's listener writes the
note itself, which dag.test() does not run: tests/integration/test_airflow_gate.py); a dataset that fails validation fails the validate task and
nothing after it runs. Each DAG run happens in a subprocess so Airflow's settings stay out of pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from train.helpers import place_local_encoders

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIGRATE_LIMIT_S = 300
"""``airflow db migrate`` of a new SQLite database (under a minute on a quiet machine)."""
DAG_RUN_LIMIT_S = 600
"""One ``dag.test()`` of the tiny pipeline, all five stages (about two minutes on a quiet
two-core machine, several times that on a loaded one)."""
ONE_DAG_RUN_LIMIT_S = MIGRATE_LIMIT_S + DAG_RUN_LIMIT_S
"""A test's own limit: the database it migrates and the one DAG run it makes."""

TINY = [
    "train.checkpoint_every=2",
    "train.log_every=2",
    "train.batch_size=4",
    "model.identity_weights=null",
    "evaluate.gate.min_ssim=0",  # 4 steps cannot pass the quality floor; the wiring is checked
    "evaluate.gate.min_identity_top1=0",
    "registry.review_timeout_h=0",  # dag.test() waits on a review forever: none asked
]

DAG_TEST = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dag = DagBag(dag_folder=sys.argv[1]).dags["ffjobs_pipeline"]
    dag_run = dag.test(run_conf=json.loads(sys.argv[2]))
    with create_session() as session:
        rows = session.query(XComModel).filter(
            XComModel.dag_id == dag.dag_id, XComModel.run_id == dag_run.run_id
        )
        xcom = {f"{row.task_id}.{row.key}": row.value for row in rows}
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    result = {"state": dag_run.state, "tasks": states, "xcom": xcom}
    print("RESULT " + json.dumps(result))
    """
)


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh AIRFLOW_HOME with a migrated SQLite metadata database."""
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    airflow = Path(sys.executable).parent / "airflow"
    migrate = subprocess.run(
        [str(airflow), "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=MIGRATE_LIMIT_S,
    )
    assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
    return env


def dag_test(env: dict[str, str], cwd: Path, conf: dict) -> tuple[dict, str]:
    """Run the DAG once with ``conf`` in ``cwd``; return its states and XComs, and the log."""
    place_local_encoders(cwd)
    result = subprocess.run(
        [sys.executable, "-c", DAG_TEST, str(REPO / "dags"), json.dumps(conf)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=DAG_RUN_LIMIT_S,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), log


def note_line(xcom: dict, start: str) -> str:
    """The line a task handed on for the DAG run's note (XCom ``ffjobs_dag_run_note``) that
    begins with ``start``."""
    lines = [str(v) for k, v in xcom.items() if k.endswith(".ffjobs_dag_run_note")]
    found = [line for line in lines if line.startswith(start)]
    assert found, f"no note line starts with {start!r}: {lines}"
    return found[0]


def deployment_config(tmp_path: Path) -> str:
    """The deployment's own config in its ``configs/`` folder (where the tracking URI is set:
    a DAG run's conf may not), as a conf names it."""
    (tmp_path / "configs").mkdir(exist_ok=True)
    (tmp_path / "configs" / "dagtest.yaml").write_text(
        f"extends: local\ntracking:\n  tracking_uri: sqlite:///{tmp_path / 'mlflow.db'}\n"
    )
    return "dagtest"


def mlflow_client(tmp_path: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


@pytest.mark.timeout(MIGRATE_LIMIT_S + 2 * DAG_RUN_LIMIT_S)  # the run, then its resume
def test_dag_runs_every_stage_into_one_mlflow_run(airflow_env, tmp_path):
    conf = {"config": deployment_config(tmp_path), "train_steps": 4, "overrides": TINY}
    result, log = dag_test(airflow_env, tmp_path, conf)
    assert result["state"] == "success", log[-4000:]
    stages = ("validate", "preflight", "train", "evaluate", "register")
    # a manual run always trains: compare_inputs hands the run on
    tasks = dict.fromkeys(("compare_inputs", *stages), "success")
    assert result["tasks"] == {**tasks, "review": "skipped"}

    xcom = result["xcom"]
    run_dir = tmp_path / xcom["validate.run_dir"]
    # one run (key, directory, MLflow run) handed from task to task; the config stays in it
    assert xcom["preflight.run_dir"] == xcom["train.run_dir"] == xcom["validate.run_dir"]
    key = xcom["validate.run_key"]
    assert xcom["preflight.run_key"] == xcom["train.run_key"] == key
    assert run_dir == tmp_path / "runs" / key
    assert not any(name.endswith((".config", ".outcomes")) for name in xcom), sorted(xcom)
    run_id = xcom["validate.mlflow_run_id"]
    assert xcom["preflight.mlflow_run_id"] == xcom["train.mlflow_run_id"] == run_id
    report = json.loads((tmp_path / xcom["validate.validation_report"]).read_text())
    assert xcom["validate.validation_fingerprint"] == report["fingerprint"]
    assert xcom["preflight.preflight_verdict"] == "PASS"
    assert (tmp_path / xcom["preflight.preflight_report"]).is_file()
    assert xcom["train.final_step"] == 4
    assert (tmp_path / xcom["train.checkpoint"]).is_file()
    assert Path(xcom["train.checkpoint"]).parent.name == key  # the run's own checkpoint folder
    record = json.loads((run_dir / "run.json").read_text())
    assert [s["name"] for s in record["stages"]] == list(stages)
    assert record["status"] == "passed"
    assert xcom["evaluate.evaluation_gate"]["passed"] is True
    assert set(xcom["evaluate.evaluation_metrics"]) >= {"identity_top1", "psnr", "ssim"}
    assert (xcom["register.registered_name"], xcom["register.registered_version"]) == (
        "ffjobs-face-swap", "1")  # fmt: skip

    client = mlflow_client(tmp_path)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert [tags[f"ffjobs.{s}"] for s in stages] == ["passed"] * 5
    assert run.data.params["train.steps"] == "4"
    assert {"validate_seconds", "preflight_seconds", "train_seconds"} <= set(run.data.metrics)
    assert "images_per_s" in run.data.metrics  # training logged into the pipeline's run
    assert run.data.tags["airflow.dag_id"] == "ffjobs_pipeline"
    experiment = client.get_experiment_by_name("ffjobs")
    assert len(client.search_runs([experiment.experiment_id])) == 1
    first_end = run.info.end_time

    assert xcom["evaluate.evaluation_verdict"] == "passed"
    assert note_line(xcom, "ffjobs-face-swap version 1 is the challenger")

    # a second DAG run is a run of its own: it trains from step 0, the first run is untouched;
    # its model the gate blocks: a decision (evaluate succeeds, register is skipped, the DAG
    # run succeeds and its note says why), not a crash
    blocked = {**conf, "overrides": [*TINY, "evaluate.gate.min_psnr=99"]}
    again, log = dag_test(airflow_env, tmp_path, blocked)
    assert again["state"] == "success", log[-4000:]
    assert again["tasks"] == {**tasks, "register": "skipped", "review": "skipped"}
    assert again["xcom"]["train.run_key"] != key
    assert "steps 0 -> 4" in log
    assert again["xcom"]["evaluate.evaluation_verdict"] == "blocked"
    assert not again["xcom"]["evaluate.evaluation_gate"]["passed"]
    assert "register.registered_version" not in again["xcom"]
    second_record = tmp_path / again["xcom"]["validate.run_dir"] / "run.json"
    assert json.loads(second_record.read_text())["status"] == "blocked"
    blocked_line = note_line(
        again["xcom"], "A decision, not a fault: not registered (gate blocked "
    )
    assert "(evaluate.gate.min_psnr)" in blocked_line
    second = client.get_run(again["xcom"]["train.mlflow_run_id"])
    assert second.info.status == "FINISHED"
    assert (second.data.tags["ffjobs.evaluate"], second.data.tags["ffjobs.register"]) == (
        "blocked", "skipped")  # fmt: skip
    assert len(client.search_model_versions("name='ffjobs-face-swap'")) == 1
    assert client.get_run(run_id).info.end_time == first_end
    assert len(client.search_runs([experiment.experiment_id])) == 2


@pytest.mark.timeout(ONE_DAG_RUN_LIMIT_S)
def test_failed_validation_fails_the_task_and_never_trains(airflow_env, tmp_path):
    from ffjobs.data.synth import generate_dataset

    dataset = generate_dataset(tmp_path / "bad", identities=12, per_identity=3, corrupt=True)
    conf = {
        "train_steps": 4,
        # relative to the DAG run's working folder, as a conf must give a path
        "data_source": str(dataset.relative_to(tmp_path)),
        "config": deployment_config(tmp_path),
        "overrides": [*TINY, "data.validation.max_bad_fraction=0"],
    }
    result, log = dag_test(airflow_env, tmp_path, conf)
    assert result["state"] == "failed"
    assert result["tasks"]["validate"] == "failed"
    after = ("preflight", "train", "evaluate", "register")
    assert {result["tasks"][task] for task in after} == {"upstream_failed"}
    assert "validate failed: " in log  # the stage's one-line reason is the task's error
    assert not (tmp_path / "runs" / "checkpoints").exists()

    client = mlflow_client(tmp_path)
    experiment = client.get_experiment_by_name("ffjobs")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.tags["ffjobs.validate"] == "failed"
    assert "ffjobs.train" not in run.data.tags
