"""What the DAG's task processes import, imported once before any task runs: the module the
embedded Airflow's scheduler preloads in its forkserver (``[scheduler] mp_forkserver_preload``,
:func:`ffjobs.airflow.embedded.airflow_env`). Never imported by ffjobs itself.

Each task runs in a fork of a LocalExecutor worker, and the workers are forks of that
forkserver: a task inherits torch, MLflow's SQL stores, the stages and Airflow's DAG parsing
instead of importing them again (several CPU-seconds a task), and with them the ffjobs of the
scheduler's start: each task first checks that the source has not changed since
(:mod:`ffjobs.airflow.loaded_code`). The modules are then frozen out
of the collector's reach (:func:`gc.freeze`), so that no process forked below walks, and with
it copies, every object inherited here. Python's forkserver skips a preload module that fails
to import without a word: ``tests/airflow/test_embedded.py`` imports this one.
"""

from __future__ import annotations

import gc
import importlib

from ffjobs.airflow.loaded_code import source_digest
from ffjobs.runs.stages import STAGES

MODULES = (
    # the task runner, and the DAG file it parses again in every task
    "airflow.sdk.execution_time.task_runner",
    "airflow.dag_processing.dagbag",
    "ffjobs.airflow.tasks",
    "ffjobs.airflow.operators",
    "ffjobs.airflow.review",
    "ffjobs.airflow.worker_stages",
    # the stages and what they import when they run
    *(target.partition(":")[0] for target in STAGES.values()),
    "torch",
    "torchvision",
    "torchmetrics.functional.image",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.model_registry.sqlalchemy_store",
)

SOURCE_DIGEST = source_digest()
"""The package's source as imported here (:func:`ffjobs.airflow.loaded_code.stale_code`)."""

for _name in MODULES:
    importlib.import_module(_name)
gc.freeze()
