"""The bodies of the ``ffjobs_pipeline`` DAG's tasks: one ffjobs stage each.

The first task resolves the config from the DAG run's Params, creates the run directory and
starts the MLflow run; each later task rebuilds the run from the XCom state its upstream
returned and reopens the same MLflow run; the last task ends it. So one DAG run is one run
directory and one MLflow run, exactly as with ``ffjobs run``.

A stage that says no (validation policy, preflight FAIL) and a config mistake fail the task
for good (``AirflowFailException``): retrying cannot change the answer. A retryable training
failure, or an unexpected error, is raised as is so Airflow's retries apply; the MLflow run is
ended as FAILED only when no retry is left.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from ffjobs.config import Config, config_from_dict, load_config
from ffjobs.errors import ExitCode, UserError
from ffjobs.pipeline import (
    PipelineRun,
    attach_pipeline_run,
    finish_pipeline_run,
    run_stage,
    start_pipeline_run,
)

log = logging.getLogger(__name__)

PARAM_OVERRIDES: dict[str, str] = {
    "train_steps": "train.steps",
    "train_lr": "train.lr",
    "data_source": "data.source",
    "slurm_nodes": "slurm.nodes",
}
"""Typed DAG Params and the config key each one sets (left empty, the preset's value stays)."""

DEFAULT_NPROC = 2


def overrides_from_params(params: Mapping[str, Any]) -> list[str]:
    """The ``--set`` strings the Params stand for: typed Params first, then ``overrides``."""
    sets = [
        f"{key}={_yaml_scalar(params[name])}"
        for name, key in PARAM_OVERRIDES.items()
        if params.get(name) is not None
    ]
    return sets + [str(text) for text in params.get("overrides") or []]


def config_from_params(params: Mapping[str, Any]) -> Config:
    """Load ``params["config"]`` (a preset name or YAML path) with the Params' overrides."""
    try:
        return load_config(params.get("config") or "local", overrides_from_params(params))
    except UserError as exc:
        raise AirflowFailException(f"config: {exc}") from None


def validate(params: Mapping[str, Any]) -> dict[str, Any]:
    """First task: start the pipeline run, validate the dataset, hand the run on."""
    config = config_from_params(params)
    run = start_pipeline_run(config, nproc=int(params.get("nproc") or DEFAULT_NPROC))
    log.info("run directory %s, MLflow run %s", run.run_dir, run.tracker.run_id)
    return _run(run, "validate", last=False)


def preflight(state: Mapping[str, Any]) -> dict[str, Any]:
    """Check the fabric the training will use; a FAIL verdict stops the DAG run."""
    return _run(_attach(state), "preflight", last=False)


def train(state: Mapping[str, Any]) -> dict[str, Any]:
    """Train on this worker (local ranks), logging into the pipeline's MLflow run; end it."""
    return _run(_attach(state), "train", last=True)


def _attach(state: Mapping[str, Any]) -> PipelineRun:
    return attach_pipeline_run(
        config_from_dict(state["config"], source="XCom"),
        state["run_dir"],
        state["mlflow_run_id"],
        nproc=state["nproc"],
        outcomes=state["outcomes"],
    )


def _run(run: PipelineRun, stage: str, *, last: bool) -> dict[str, Any]:
    try:
        outcome = run_stage(run, stage, echo=log.info)
    except UserError as exc:
        finish_pipeline_run(run, "FAILED")
        raise AirflowFailException(f"{stage}: {exc}") from None
    except BaseException:
        _release(run, final=not _retries_left())
        raise
    if outcome.status == "failed":
        if outcome.exit_code == ExitCode.RETRYABLE and _retries_left():
            _release(run, final=False)
            raise AirflowException(f"{stage} failed (retryable): {outcome.summary}")
        finish_pipeline_run(run, "FAILED")
        raise AirflowFailException(f"{stage} failed: {outcome.summary}")
    if last:
        finish_pipeline_run(run, "FINISHED")
    else:
        _release(run, final=False)
    return _state(run)


def _release(run: PipelineRun, *, final: bool) -> None:
    """Let go of the MLflow run: FAILED if nothing will come back to it, else leave it open
    (the next task, or this task's retry, reopens it)."""
    if final:
        finish_pipeline_run(run, "FAILED")
    else:
        run.tracker.finish("RUNNING")


def _retries_left() -> bool:
    try:
        ti = get_current_context()["ti"]
    except Exception:  # outside a task (direct call): no retries
        return False
    return ti.try_number <= ti.max_tries


def _state(run: PipelineRun) -> dict[str, Any]:
    """The XCom the next task rebuilds the run from, plus each stage's facts under their own
    keys (``validation_fingerprint``, ``preflight_verdict``, ``checkpoint``, ...)."""
    facts: dict[str, Any] = {}
    for outcome in run.outcomes:
        prefix = "validation" if outcome.name == "validate" else outcome.name
        for key, value in outcome.facts.items():
            facts[key if outcome.name == "train" else f"{prefix}_{key}"] = value
    return {
        "run_dir": str(run.run_dir),
        "mlflow_run_id": run.tracker.run_id,
        "nproc": run.nproc,
        "config": run.config.to_dict(),
        "outcomes": [{**asdict(o), "exit_code": int(o.exit_code)} for o in run.outcomes],
        **facts,
    }


def _yaml_scalar(value: Any) -> str:
    """A Param's value as ``--set`` reads it back (a YAML scalar): strings quoted."""
    return json.dumps(value)
