"""The evaluate and register tasks: stages that run on the worker, with extra links to where a
reviewer looks next (the MLflow run, the registered model version)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from ffjobs.airflow.links import MlflowRunLink, ModelVersionLink


class WorkerStageOperator(BaseOperator):
    """Run the stage ``stage`` for the run handed down in ``state`` (the previous task's XCom)."""

    stage = ""
    template_fields = ("state",)
    operator_extra_links = (MlflowRunLink(),)

    def __init__(self, *, state: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.state = state

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from ffjobs.airflow import tasks
        from ffjobs.tracking.ui_links import run_link

        run = tasks.attach(self.state)
        MlflowRunLink().keep(context, run_link(run.config.tracking, run.mlflow_run_id))
        try:
            return getattr(tasks, self.stage)(self.state)
        finally:
            self._keep_links(context)

    def _keep_links(self, context: Mapping[str, Any]) -> None:
        """Links the stage's recorded result names (kept also when the task is skipped)."""


class EvaluateOperator(WorkerStageOperator):
    """Evaluate the run's model; a blocked gate is the task's verdict, not its failure."""

    stage = "evaluate"


class RegisterOperator(WorkerStageOperator):
    """Register the run's model as the challenger; skipped, naming why, for a blocked model."""

    stage = "register"
    operator_extra_links = (MlflowRunLink(), ModelVersionLink())

    def _keep_links(self, context: Mapping[str, Any]) -> None:
        from ffjobs.airflow import tasks

        # the run as the stage left it (the record it wrote, read again)
        ModelVersionLink().keep(context, tasks.attach(self.state).facts("register").get("link"))
