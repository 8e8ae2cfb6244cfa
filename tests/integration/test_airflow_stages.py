"""Every stage of ``ffjobs_pipeline`` runs inside a real Airflow task (LocalExecutor, triggered
through REST API v2), on a dataset nothing has seen, from a working folder nothing has used.

A task's process has threads and its main program is the ``airflow`` command, which cannot run
again inside a task (it dies on the database URL Airflow blocks there): worker processes that
re-ran it broke the validate task on every new dataset, and ``dag.test()`` or a warm validation
cache hid it. So this test starts Airflow of its own in fresh folders, has the validate task
generate the dataset (enough images for the generator's worker processes) and validate it with
an empty cache (every image inspected by the validation workers), and trains with the
asynchronous checkpoint writer (a process of its own, in each rank).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from airflow_stack import (
    DAG_ID,
    EVALUATION_ENCODER,
    RUNS,
    START_TIMEOUT_S,
    AirflowStack,
    task_log,
    wait_for_end,
    write_evaluation_encoder,
)

from ffjobs.data.synth import PARALLEL_FROM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STAGES = ("validate", "preflight", "train", "evaluate", "register")
TASKS = ("validate", "compare_inputs", *STAGES[1:])  # a manual run's inputs are not compared
PER_IDENTITY = 8
IDENTITIES = PARALLEL_FROM // PER_IDENTITY  # the generator's worker processes draw them
CONF = {
    "config": "local",  # the shipped preset: local ranks, data.source generated if missing
    "train_steps": 4,
    "overrides": [
        f"data.synth.identities={IDENTITIES}",
        f"data.synth.per_identity={PER_IDENTITY}",
        "data.validation.cache_dir=validation-cache",  # in the fresh working folder: empty
        "data.validation.workers=2",  # a pool even on a one-core machine
        "train.async_checkpoint=true",
        "train.checkpoint_every=2",
        "train.log_every=2",
        "train.batch_size=4",
        "model.identity_weights=null",
        "evaluate.gate.min_ssim=0",  # 4 steps cannot pass the quality floor; the wiring is checked
        "evaluate.gate.min_identity_top1=0",
        f"evaluate.identity_weights={EVALUATION_ENCODER}",
        "registry.review_timeout_h=0",  # no reviewer here: the review task is skipped
    ],
}
# Each task starts a fresh interpreter that imports Airflow and ffjobs (tens of seconds on a
# busy two-core machine); validate draws and inspects 512 images, preflight and train start two
# torch ranks each, evaluate and register load the model: about five minutes on two busy cores.
# Twenty bound a hang, not the expected time.
RUN_TIMEOUT_S = 1200
# What a validation worker that died, or that re-ran the task's main program, leaves in a log.
WORKER_CRASH = (
    "validation worker",
    "WorkerDied",
    "synthetic-data worker",
    "airflow-db-not-allowed",
    "_fixup_main_from_path",
)


@pytest.fixture(scope="module")
def fresh_airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """All four Airflow components in an AIRFLOW_HOME and a working folder of this module's own
    (the session's stack has a working folder other tests may have filled)."""
    root = tmp_path_factory.mktemp("airflow-stages")
    stack = AirflowStack(root / "home", root / "work")
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.mark.timeout(START_TIMEOUT_S + RUN_TIMEOUT_S + 300)  # the stack's start, the run, logs
def test_every_stage_runs_in_a_real_task_on_a_new_dataset(fresh_airflow):
    stack = fresh_airflow
    dataset = stack.workdir / "runs" / "data" / "synthetic"  # the preset's data.source
    assert not dataset.exists() and not (stack.workdir / "validation-cache").exists()
    write_evaluation_encoder(stack.workdir)
    assert stack.patch(f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    status, body = stack.post(RUNS, {"logical_date": None, "conf": CONF})
    assert status in (200, 201), body
    run_id = body["dag_run_id"]

    state = wait_for_end(stack, run_id, RUN_TIMEOUT_S)
    status, body = stack.get(f"{RUNS}/{run_id}/taskInstances")
    assert status == 200, body
    states = {ti["task_id"]: ti["state"] for ti in body["task_instances"]}
    unfinished = [task for task in TASKS if states.get(task) != "success"]
    logs = {task: task_log(stack, run_id, task) for task in unfinished}
    expected = {**dict.fromkeys(TASKS, "success"), "review": "skipped"}
    assert (state, states) == ("success", expected), "\n\n".join(
        f"--- {task} ({states.get(task)}):\n{log[-4000:]}" for task, log in logs.items()
    )

    validate_log = task_log(stack, run_id, "validate")
    assert f"{IDENTITIES * PER_IDENTITY} images, {IDENTITIES} identities" in validate_log
    for crash in WORKER_CRASH:
        assert crash not in validate_log, validate_log[-4000:]
    # the dataset was new: the task generated it, and every image went through the workers
    assert len(list(dataset.glob("*/*.jpg"))) == IDENTITIES * PER_IDENTITY
    (report,) = (stack.workdir / "runs").glob("*/validation/report.json")
    timing = json.loads(report.read_text())["timing"]
    assert timing["inspected"] == IDENTITIES * PER_IDENTITY and not timing["report_cached"]
    # the ranks' checkpoint writer processes wrote in the background, inside the train task
    assert "writing in the background" in task_log(stack, run_id, "train")
    run_dir = report.parent.parent
    assert [s["name"] for s in json.loads((run_dir / "run.json").read_text())["stages"]] == list(
        STAGES
    )
    assert not any(crash in stack.all_logs() for crash in WORKER_CRASH[:3])
