"""Extra links from the tasks to where a person looks next: the run's MLflow run, the SLURM
attempt's logs and the registered model version. Each link's address is kept in the task's XCom
(under the link's ``xcom_key``) when the task knows it, and read back by the UI; a link without
one is empty. Only web addresses are kept: a store without a UI (``sqlite:``) has no page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom


class _KeptLink(BaseOperatorLink):
    """A link whose address the task kept in XCom with :meth:`keep`."""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        value = XCom.get_value(ti_key=ti_key, key=self.xcom_key)
        return str(value) if value else ""

    def keep(self, context: Mapping[str, Any], address: str | None) -> None:
        if address and address.startswith(("http://", "https://", "file://")):
            context["ti"].xcom_push(key=self.xcom_key, value=address)


class MlflowRunLink(_KeptLink):
    """The run's MLflow run (its UI page where the tracking URI is a server)."""

    name = "MLflow run"


class AttemptLogsLink(_KeptLink):
    """The folder of the SLURM attempt being watched: each rank's log and failure report."""

    name = "SLURM attempt logs"


class ModelVersionLink(_KeptLink):
    """The model version the register task made: its card, its run, its review state."""

    name = "MLflow model version"
