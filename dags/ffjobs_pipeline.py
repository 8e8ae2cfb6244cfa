"""ffjobs pipeline: validate -> preflight -> train -> evaluate -> register.

Trigger it by hand from the UI form: pick a config preset and override a few common fields
(empty keeps the preset's value), or add any ``key=value`` under ``overrides``. A conf with an
unknown field, a config outside ``configs/``, a path leaving the working folder or a value the
typed config refuses is answered 400 by the api-server (the ffjobs plugin) and no DAG run is
made; the first task checks the same again. One DAG run is
one run: a run key, a run directory (``runs/<run key>`` under the worker's working directory),
its own checkpoint folder and one MLflow run; ``resume`` continues an earlier run instead. Each
task's XCom carries the run key and the stage's small facts (report paths, verdict, checkpoint,
evaluation metrics and gate, registered version). A model the evaluation gate blocks fails the
DAG run; one it passes is registered with the alias ``challenger`` for review.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task

from ffjobs.airflow import tasks
from ffjobs.airflow.operators import PreflightOperator, TrainOperator
from ffjobs.airflow.trigger_conf import (
    CONFIG_NAME_PATTERN,
    MAX_OVERRIDE_CHARS,
    MAX_OVERRIDES,
    RUN_KEY_PATTERN,
    preset_names,
)
from ffjobs.config import param_schema


@dag(
    dag_id="ffjobs_pipeline",
    schedule=None,
    catchup=False,
    tags=["ffjobs"],
    doc_md=__doc__,
    params={
        "config": Param(
            "local",
            type="string",
            pattern=CONFIG_NAME_PATTERN,
            examples=preset_names(),
            title="Config preset",
            description="A shipped preset, or a YAML file's path relative to the deployment's "
            "configs/ folder (no absolute path, no '..').",
        ),
        "train_steps": Param(
            None,
            **param_schema("train.steps", nullable=True),
            title="train.steps",
            description="Optimizer steps.",
        ),
        "train_lr": Param(
            None,
            **param_schema("train.lr", nullable=True),
            title="train.lr",
            description="Learning rate.",
        ),
        "data_source": Param(
            None,
            type=["null", "string"],
            title="data.source",
            description="Dataset directory or s3:// prefix.",
        ),
        "slurm_nodes": Param(
            None,
            **param_schema("slurm.nodes", nullable=True),
            title="slurm.nodes",
            description="Nodes of the training job.",
        ),
        "nproc": Param(
            None,
            **param_schema("slurm.tasks_per_node", nullable=True),
            title="Local ranks",
            description="Processes the preflight and train tasks start on this worker "
            "(slurm.tasks_per_node); empty keeps the preset's value.",
        ),
        "resume": Param(
            None,
            type=["null", "string"],
            pattern=RUN_KEY_PATTERN,
            title="Resume run",
            description="Run key to continue (its config, checkpoints and MLflow run; the fields "
            "above override it); empty starts a new run.",
        ),
        "overrides": Param(
            [],
            type="array",
            items={
                "type": "string",
                "pattern": r"^[A-Za-z_][A-Za-z0-9_.]*=.*$",
                "maxLength": MAX_OVERRIDE_CHARS,
            },
            maxItems=MAX_OVERRIDES,
            title="Other overrides",
            description="key=value lines, as ffjobs --set (e.g. train.batch_size=16); each "
            "value is checked by the config's own types and ranges, and paths stay inside the "
            "working folder.",
        ),
    },
)
def ffjobs_pipeline() -> None:
    @task(task_id="validate", multiple_outputs=True)
    def validate(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return tasks.validate(params or {})

    @task(task_id="evaluate", multiple_outputs=True, trigger_rule="none_failed")
    def evaluate(state: dict[str, Any]) -> dict[str, Any]:
        return tasks.evaluate(state)

    @task(task_id="register", multiple_outputs=True, retries=1)
    def register(state: dict[str, Any]) -> dict[str, Any]:
        return tasks.register(state)

    # on the worker for the local profile; on SLURM deferred while its short job runs
    preflight = PreflightOperator(task_id="preflight", state=validate(), multiple_outputs=True)
    checked = preflight.output
    # evaluate reads the run from the preflight's XCom, so a skipped train (a resumed run with
    # nothing left to train) still evaluates and registers the run's model
    evaluated = evaluate(checked)
    # on the worker for the local profile; on SLURM deferred, holding no worker while the job
    # runs (a retry re-attaches to the run's job and continues its attempt budget)
    TrainOperator(task_id="train", state=checked, multiple_outputs=True, retries=1) >> evaluated
    register(evaluated)


ffjobs_pipeline()
