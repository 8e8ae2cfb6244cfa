"""The bodies of the ``ffjobs_pipeline`` DAG's tasks: one ffjobs stage each.

The first task resolves the config from the DAG run's Params and creates the run (run key, run
directory, MLflow run; or resumes the run named by the ``resume`` Param); each later task
attaches to it by its run directory, handed down in XCom with the run key, the MLflow run id
and the stage's small facts (never the config: it is in the run directory). The last task
(register) ends the MLflow run. So one DAG run is one run, exactly as with ``ffjobs run``.

A stage that says no (validation policy, preflight FAIL) and a config mistake fail the task
for good (``AirflowFailException``): retrying cannot change the answer. A model the evaluation
gate blocks is a decision, not a crash: the evaluate task succeeds with
``evaluation_verdict: blocked`` and the gate's checks in its XCom, and the register task is
skipped with the reason. A retryable training failure, or an unexpected error, is raised as is
so Airflow's retries apply; the run is ended as FAILED only when no retry is left. A stage with
nothing to do (a resumed run already trained, a version already registered, a blocked model) is
skipped (``AirflowSkipException``), never reported as a fresh success; the tasks after it still
run.

What a person should read first about the DAG run (a blocked gate, the registered version, the
failure that stopped it) each task hands to :func:`note`; the ffjobs plugin writes those lines
as the DAG run's note when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from ffjobs.airflow.loaded_code import stale_code
from ffjobs.airflow.run_note import NOTE_KEY
from ffjobs.airflow.trigger_conf import check_trigger_conf
from ffjobs.config import Config, load_config
from ffjobs.errors import ExitCode, UserError
from ffjobs.runs.run import (
    Run,
    StageOutcome,
    attach_run,
    create_run,
    finish_run,
    resume_run,
    resumed_config,
)
from ffjobs.runs.stages import STAGES, check_plan, run_stage
from ffjobs.tracking.known_secrets import known_secrets
from ffjobs.tracking.redact import redact_document, redact_text

log = logging.getLogger(__name__)

STAGE_FACTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "validate": ("validation_", ("fingerprint", "report")),
    "preflight": ("preflight_", ("verdict", "report")),
    "train": ("", ("checkpoint", "final_step")),
    "evaluate": ("evaluation_", ("verdict", "report", "metrics", "gate")),
    "register": ("registered_", ("name", "version", "model_uri")),
}
"""The facts each task puts in XCom, with its prefix (``validation_fingerprint``, ...,
``checkpoint``, ``evaluation_metrics``, ``registered_version``)."""


def note(line: str) -> None:
    """Hand ``line`` (redacted) to the DAG run's note: the ffjobs plugin writes every task's
    line there, in the order they came, when the DAG run ends. Outside a task: nothing."""
    try:
        ti = get_current_context()["ti"]
    except Exception:  # a direct call, not a task
        return
    ti.xcom_push(key=NOTE_KEY, value=redact_text(line))


def config_from_params(params: Mapping[str, Any]) -> Config:
    """Load ``params["config"]`` (a preset name or YAML path) with the Params' overrides; with
    ``params["resume"]``, the config that run was started with plus the overrides."""
    _refuse_stale_code()
    try:
        # the api-server refused a bad conf already; a run triggered another way stops here
        preset, overrides = check_trigger_conf(params)
        if params.get("resume"):
            return resumed_config(str(params["resume"]), overrides, preset)
        return load_config(preset, overrides)
    except UserError as exc:
        raise AirflowFailException(redact_text(f"config: {exc}")) from None


def validate(params: Mapping[str, Any]) -> dict[str, Any]:
    """First task: create (or resume) the run, validate the dataset, hand the run on."""
    config = config_from_params(params)
    try:
        check_plan(config, tuple(STAGES))
        if params.get("resume"):
            from ffjobs.train.checkpoint import latest_step

            run = resume_run(str(params["resume"]), config, echo=log.info, latest_step=latest_step)
        else:
            # the DAG run's tags come from the AIRFLOW_CTX_* variables Airflow sets for the
            # task (ffjobs.tracking.mlflow_logger.environment_tags, applied by create_run);
            # the MLflow run's user is the person who triggered it, not the worker's account
            run = create_run(config, echo=log.info, tags=_triggered_by())
    except UserError as exc:
        raise AirflowFailException(redact_text(f"run: {exc}")) from None
    _mask_in_task_log()  # the run remembered its config's secrets
    log.info("run %s in %s, MLflow run %s", run.key, run.dir, run.mlflow_run_id)
    return _run(run, "validate", last=False)


SCHEDULED_RUN_TYPES = frozenset({"scheduled", "asset_triggered"})
"""DAG runs Airflow made by itself (cron, dataset update): they skip training on unchanged
inputs; one triggered by hand (``manual``), by another DAG or a backfill always trains."""

GPU_STAGES = ("preflight", "train", "evaluate", "register")


def compare_inputs(state: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Between validation and the GPU stages: a scheduled run whose dataset fingerprint,
    config and code equal those of the champion's or the challenger's run stops here, unless
    the ``force`` Param is on. It then ends the run (its MLflow run ``FINISHED``, with the
    reason as its note and tag ``ffjobs.unchanged``), puts the reason in XCom
    (``skipped_reason``) and is skipped with it, and so are the GPU stages. Otherwise it hands
    ``state`` on."""
    from ffjobs.registry.inputs import registered_by_alias, run_inputs, unchanged_since
    from ffjobs.tracking.mlflow_logger import mlflow_client

    run = attach(state)
    context = get_current_context()
    run_type = str(getattr(context["dag_run"].run_type, "value", context["dag_run"].run_type))
    inputs = run_inputs(run.config, run.record.get("dataset_fingerprint"))
    run.logger.set_tags({f"ffjobs.{name}": value for name, value in inputs.tags().items()})
    run.logger.flush()
    reason = None
    with stage_errors(run, "compare_inputs"):
        if run_type not in SCHEDULED_RUN_TYPES:
            log.info("a %s run always trains (%s)", run_type, inputs.describe())
        elif params.get("force"):
            log.info("force is on: training whatever is registered (%s)", inputs.describe())
        elif not run.config.tracking.enabled:
            log.info("tracking.enabled is false: no registry to compare with; training")
        else:
            client = mlflow_client(run.config.tracking)
            registered = registered_by_alias(client, run.config.registry.model_name)
            reason = unchanged_since(inputs, registered)
            if reason is None:
                log.info("inputs differ from the champion's and challenger's: training")
    if reason is None:
        return dict(state)
    reason = redact_text(f"{reason}; the force Param trains anyway")
    run.record["unchanged"] = reason
    run.logger.set_tags(
        {
            "ffjobs.unchanged": reason,
            "mlflow.note.content": reason,  # the run's description in the MLflow UI
            **{f"ffjobs.{stage}": "skipped" for stage in GPU_STAGES},
        }
    )
    finish_run(run, "FINISHED", end_tracking=True)
    context["ti"].xcom_push(key="skipped_reason", value=reason)
    log.info("no training: %s", reason)  # the exception's reason is a field of its own line
    raise AirflowSkipException(reason)


def _triggered_by() -> dict[str, str] | None:
    """``{"mlflow.user": <who triggered the DAG run>}``, or None (a schedule, no context)."""
    try:
        user = getattr(get_current_context()["dag_run"], "triggering_user_name", None)
    except Exception:  # a direct call, not a task
        return None
    return {"mlflow.user": str(user)} if user else None


def preflight(state: Mapping[str, Any]) -> dict[str, Any]:
    """Check the fabric the training will use; a FAIL verdict stops the DAG run."""
    return _run(attach(state), "preflight", last=False)


def train(state: Mapping[str, Any]) -> dict[str, Any]:
    """Train (local ranks on this worker, or a supervised SLURM job of the profile)."""
    return _run(attach(state), "train", last=False)


def evaluate(state: Mapping[str, Any]) -> dict[str, Any]:
    """Evaluate the run's model on held-out identities; a blocked gate is this task's verdict
    (it succeeds; register is skipped)."""
    return _run(attach(state), "evaluate", last=False)


def register(state: Mapping[str, Any]) -> dict[str, Any]:
    """Register the model for review (alias ``challenger``); end the run's MLflow run."""
    return _run(attach(state), "register", last=True)


def attach(state: Mapping[str, Any]) -> Run:
    """The run a later task holds, by the run directory in ``state`` (the upstream XCom); its
    secrets are masked in the task's log from now on."""
    _refuse_stale_code()
    run = attach_run(state["run_dir"], echo=log.info)  # remembers its config's secrets
    _mask_in_task_log()
    return run


def _refuse_stale_code() -> None:
    """Retryable: a try after the scheduler's restart runs the code on disk."""
    stale = stale_code()
    if stale:
        raise AirflowException(stale)


def _mask_in_task_log() -> None:
    """Hand every known secret to Airflow's log masker, so that no line of the task's log (a
    library's warning, a traceback) shows one."""
    from airflow.sdk.log import mask_secret

    for secret in known_secrets():
        mask_secret(secret)


def _run(run: Run, stage: str, *, last: bool) -> dict[str, Any]:
    with stage_errors(run, stage):
        outcome = run_stage(run.config, run, stage)
    return conclude(run, outcome, last=last)


@contextmanager
def stage_errors(run: Run, stage: str) -> Iterator[None]:
    """What a task does with an error its stage raises: a mistake of the input or config
    (``UserError``) fails the task for good; anything else is raised as is, so Airflow's retries
    apply, and ends the run as FAILED only when no retry is left. Never wrap a deferral in it."""
    try:
        yield
    except UserError as exc:
        finish_run(run, "FAILED", end_tracking=True)
        note(f"{stage}: {exc}")
        raise AirflowFailException(redact_text(f"{stage}: {exc}")) from None
    except BaseException:
        if not _retries_left():
            finish_run(run, "FAILED", end_tracking=True)
        raise


def conclude(run: Run, outcome: StageOutcome, *, last: bool = False) -> dict[str, Any]:
    """The task's end for a stage's recorded ``outcome``: its XCom, or the exception that
    tells Airflow whether a retry can help (``AirflowFailException``: no)."""
    stage = outcome.name
    if outcome.status == "failed":
        if outcome.exit_code == ExitCode.RETRYABLE and _retries_left():
            raise AirflowException(redact_text(f"{stage} failed (retryable): {outcome.summary}"))
        finish_run(run, "FAILED", end_tracking=True)
        note(f"{stage} failed: {outcome.summary}")
        raise AirflowFailException(redact_text(f"{stage} failed: {outcome.summary}"))
    if last:
        finish_run(run, "FINISHED", end_tracking=True)
    if outcome.status == "blocked":  # a decision: the task succeeds and says so
        note(f"A decision, not a fault: not registered ({outcome.summary})")
    elif stage == "register" and outcome.status == "passed":
        note(outcome.summary)
    if outcome.status == "skipped":  # nothing to train, a version already registered, blocked
        raise AirflowSkipException(redact_text(outcome.summary))
    return _state(run, stage)


def _retries_left() -> bool:
    try:
        ti = get_current_context()["ti"]
    except Exception:  # outside a task (direct call): no retries
        return False
    return ti.try_number <= ti.max_tries


def _state(run: Run, stage: str) -> dict[str, Any]:
    """XCom for the next task: the run's identity and this stage's small facts, redacted
    (XCom is shown in the UI and kept in Airflow's database)."""
    prefix, keys = STAGE_FACTS[stage]
    facts = run.facts(stage)
    state = {
        "run_key": run.key,
        "run_dir": str(run.dir),
        "mlflow_run_id": run.mlflow_run_id,
        **{prefix + key: facts.get(key) for key in keys},
    }
    return redact_document(state)
