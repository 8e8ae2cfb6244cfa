"""What an MLflow run says about itself in the UI: a description (the run's note), who started
it, from where, and the code's commit (MLflow's own ``mlflow.*`` tags, which its run page and
runs table show as Description, User, Source and Git commit)."""

from __future__ import annotations

import getpass
from typing import Any

from ffjobs.config import Config
from ffjobs.tracking.provenance import UNKNOWN, code_commit

NOTE_TAG = "mlflow.note.content"
USER_TAG = "mlflow.user"
SOURCE_NAME_TAG = "mlflow.source.name"
SOURCE_TYPE_TAG = "mlflow.source.type"
COMMIT_TAG = "mlflow.source.git.commit"


def run_description(config: Config, key: str, airflow: dict[str, str] | None) -> str:
    """A few Markdown lines: what the run trains, on what, where, and how it was started."""
    slurm, train = config.slurm, config.train
    started = (
        f"Airflow DAG `{airflow['dag_id']}`, run `{airflow['run_id']}`"
        + (f" (<{airflow['url']}>)" if airflow.get("url") else "")
        if airflow
        else "the command line (`ffjobs`)"
    )
    return "\n".join(
        [
            f"ffjobs run `{key}` of config `{config.name}`: face swap at "
            f"{config.model.resolution} px, {train.steps} steps on {slurm.nodes} node(s) x "
            f"{slurm.tasks_per_node} rank(s) ({slurm.executor} executor).",
            f"- Data: `{config.data.source}`",
            f"- Started from {started}",
            f"- Continue or inspect: `ffjobs runs show {key}`",
        ]
    )


def description_tags(
    config: Config, key: str, airflow: dict[str, str] | None, user: str | None = None
) -> dict[str, Any]:
    """The ``mlflow.*`` tags of a new run: description, user (``user``, else this process's),
    source and the code's commit (left out when unknown: an installed package)."""
    tags = {
        NOTE_TAG: run_description(config, key, airflow),
        USER_TAG: user or _os_user(),
        SOURCE_NAME_TAG: f"airflow:{airflow['dag_id']}" if airflow else "ffjobs run",
        SOURCE_TYPE_TAG: "JOB" if airflow else "LOCAL",
    }
    commit = code_commit()
    if commit != UNKNOWN:
        tags[COMMIT_TAG] = commit
    return tags


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a bare container)
        return UNKNOWN
