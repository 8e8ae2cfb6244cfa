"""ffjobs pipeline: validate -> compare_inputs -> preflight -> train -> evaluate -> register -> review.

Trigger it by hand from the UI form (``ffjobs.airflow.form``): pick a preset, change a few
common fields in its sections (what to train, where, how long, resume; empty keeps the preset's
value), or add any ``key=value`` under the advanced overrides. A conf with an unknown field, a
config outside ``configs/``, a path leaving the working folder or a value the typed config
refuses is answered 400 by the api-server (the ffjobs plugin) naming the field, and no DAG run
is made; the first task checks the same again. One DAG run is one run: a run key, a run directory (``runs/<run key>`` under the worker's working directory),
its own checkpoint folder and one MLflow run; ``resume`` continues an earlier run instead. Each
task's XCom carries the run key and the stage's small facts (report paths, verdict, checkpoint,
evaluation verdict, metrics and gate, registered version). A model the evaluation gate blocks
is a decision, not a crash: evaluate succeeds with the verdict, register is skipped with the
reason, and the DAG run succeeds with a note saying so; a model the gate passes is registered
with the alias ``challenger`` for review: the review task asks for Approve or Reject with a
reason (the UI's Required actions) and records the answer on the version as ``ffjobs registry
approve|reject`` does (``ffjobs.airflow.review``). The evaluate and register tasks link to the
MLflow run and the model version.

The deployment's ``configs/schedule.yaml`` (``ffjobs.airflow.schedule``) may also schedule it:
a cron expression and/or the dataset's Asset, and the preset those runs use. Such a run whose
dataset fingerprint, config and code equal those of the champion's or challenger's run stops
after validation: ``compare_inputs`` is skipped with the reason, and so are the GPU stages
(unless the ``force`` Param is on). A run triggered by hand always trains.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import dag, task

from ffjobs.airflow import tasks
from ffjobs.airflow.form import pipeline_params
from ffjobs.airflow.operators import PreflightOperator, TrainOperator
from ffjobs.airflow.review import ReviewOperator
from ffjobs.airflow.schedule import dag_schedule, load_schedule
from ffjobs.airflow.worker_stages import EvaluateOperator, RegisterOperator

SCHEDULE = load_schedule()  # configs/schedule.yaml of the folder Airflow starts in


@dag(
    dag_id="ffjobs_pipeline",
    schedule=dag_schedule(SCHEDULE),
    catchup=False,
    tags=["ffjobs"],
    doc_md=__doc__,
    params=pipeline_params(schedule=SCHEDULE),
)
def ffjobs_pipeline() -> None:
    @task(task_id="validate", multiple_outputs=True)
    def validate(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return tasks.validate(params or {})

    @task(task_id="compare_inputs", multiple_outputs=True)
    def compare_inputs(state: dict[str, Any], params: dict[str, Any] | None = None):
        return tasks.compare_inputs(state, params or {})

    # on the worker for the local profile; on SLURM deferred while its short job runs (a retry
    # reads the job its try left: a FAIL verdict is final, never retried)
    preflight = PreflightOperator(
        task_id="preflight",
        state=compare_inputs(validate()),
        multiple_outputs=True,
        retries=1,
        retry_delay=timedelta(seconds=10),
    )
    checked = preflight.output
    # evaluate reads the run from the preflight's XCom, so a skipped train (a resumed run with
    # nothing left to train) still evaluates and registers the run's model
    # at least one success: a skipped preflight (unchanged inputs) skips it too
    evaluated = EvaluateOperator(
        task_id="evaluate",
        state=checked,
        multiple_outputs=True,
        trigger_rule="none_failed_min_one_success",
    )
    # on the worker for the local profile; on SLURM deferred, holding no worker while the job
    # runs (a retry re-attaches to the run's job and continues its attempt budget); a retryable
    # failure of local ranks is retried from the run's newest verified checkpoint
    train = TrainOperator(
        task_id="train",
        state=checked,
        multiple_outputs=True,
        retries=1,
        retry_delay=timedelta(seconds=10),
    )
    train >> evaluated
    register = RegisterOperator(
        task_id="register", state=evaluated.output, multiple_outputs=True, retries=1
    )
    # a person approves or rejects the registered version; skipped when nothing was registered
    ReviewOperator(task_id="review", state=register.output)


ffjobs_pipeline()
