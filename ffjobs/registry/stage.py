"""The register stage: the run's evaluated model into the registry as the ``challenger``."""

from __future__ import annotations

from typing import Any

from ffjobs.config import Config
from ffjobs.errors import ExitCode, UserError
from ffjobs.runs.run import Run, StageOutcome, link

STAGE = "register"
STEP_TAG = "checkpoint_step"


def register_stage(config: Config, run: Run) -> StageOutcome:
    """Log the run's model (its latest verified checkpoint, the one evaluate measured) into its
    MLflow run, register it as a new version of ``registry.model_name`` with the model card as
    description, review tags and the alias ``challenger``.

    Refuses a run without evaluation results. A run whose gate blocked its model is ``skipped``
    with the gate's failed checks as the reason (a decision, not a fault). A run whose model at
    this step is registered already (a retried task, a resumed run) is ``skipped``, naming
    that version and whether the alias is on it, read back from the registry; a version a lost
    connection left without its alias is finished (``passed``). Facts: ``name``, ``version``,
    ``model_uri`` (``models:/NAME/V``), ``link``.
    """
    from ffjobs.train.swap import face_swap_from_checkpoint

    evaluation = _evaluation(run)
    gate = evaluation.get("gate") or {}
    if not gate.get("passed"):
        reasons = "; ".join(gate.get("failures") or gate.get("reasons") or ["no gate decision"])
        summary = f"not registered: the evaluation gate blocked this model ({reasons})"
        return StageOutcome(STAGE, "skipped", 0.0, summary, facts={"blocked": reasons})
    if not config.tracking.enabled:
        return StageOutcome(STAGE, "skipped", 0.0, "tracking.enabled is false: no registry")
    if run.mlflow_run_id is None:
        return StageOutcome(
            STAGE,
            "failed",
            0.0,
            f"run {run.key} has no MLflow run (the tracking server was unreachable when it "
            f"started); when it is back: ffjobs run --resume {run.key} --stages register",
            ExitCode.RETRYABLE,
        )
    model, step = face_swap_from_checkpoint(config, run.checkpoint_dir)
    if evaluation.get("step") is not None and int(evaluation["step"]) != step:
        raise UserError(
            f"run {run.key}: its latest verified checkpoint is step {step} but evaluate "
            f"measured step {evaluation['step']}; evaluate it again first: "
            f"ffjobs run --resume {run.key} --stages evaluate,register"
        )
    from mlflow.exceptions import MlflowException

    try:
        return _register(config, run, model, step)
    except MlflowException as exc:
        return StageOutcome(
            STAGE,
            "failed",
            0.0,
            f"registry at {config.tracking.tracking_uri}: {str(exc).splitlines()[0]}",
            ExitCode.RETRYABLE,
        )


def _evaluation(run: Run) -> dict[str, Any]:
    evaluation = run.facts("evaluate")
    if not evaluation:
        raise UserError(
            f"run {run.key} has no evaluation results: the register stage registers the model "
            f"the evaluate stage measured; run it first: "
            f"ffjobs run --resume {run.key} --stages evaluate,register"
        )
    return evaluation


def _register(config: Config, run: Run, model: Any, step: int) -> StageOutcome:
    from ffjobs.registry.client import PENDING, STATUS_TAG
    from ffjobs.registry.inputs import run_inputs
    from ffjobs.registry.model_card import KEY_METRICS, model_card
    from ffjobs.registry.publish import log_face_swap, register_version
    from ffjobs.tracking.mlflow_logger import mlflow_client
    from ffjobs.tracking.provenance import airflow_dag_run, code_commit
    from ffjobs.tracking.redact import redact_text
    from ffjobs.tracking.ui_links import is_link, model_version_link

    name = config.registry.model_name
    client = mlflow_client(config.tracking)
    existing = _registered_already(client, name, run.mlflow_run_id, step)
    if existing is not None:
        return _registered_before(config, client, name, existing, step)

    commit, airflow, run_link = code_commit(), airflow_dag_run(run.record), link(run)
    card = model_card(
        run,
        step=step,
        links={
            "mlflow_run": run_link,
            "airflow": (airflow.get("url") or f"{airflow['dag_id']} / {airflow['run_id']}")
            if airflow
            else None,
            "git_commit": commit,
        },
    )
    card = redact_text(card)  # the same text on disk, as the run's artifact, and in the registry
    card_file = run.stage_dir(STAGE) / "model_card.md"
    card_file.write_text(card)
    metrics = run.facts("evaluate").get("metrics") or {}
    tags = {
        STATUS_TAG: PENDING,
        # what a scheduled run compares with, to skip training on unchanged inputs
        **run_inputs(config, run.record.get("dataset_fingerprint")).tags(),
        "git_commit": commit,
        "run_key": run.key,
        STEP_TAG: str(step),
        **({"airflow_run_id": airflow["run_id"]} if airflow else {}),
        **{f"eval.{m}": f"{metrics[m]:.4g}" for m in KEY_METRICS if m in metrics},
    }
    info = log_face_swap(client, config.tracking, run.mlflow_run_id, model, config.model)
    version = register_version(
        client,
        config.tracking,
        name,
        info,
        run.mlflow_run_id,
        description=card,
        tags=tags,
        run_link=run_link if is_link(run_link) else None,
    )
    facts = _facts(config, name, version.version)
    return StageOutcome(
        STAGE,
        "passed",
        0.0,
        f"{name} version {version.version} is the challenger, pending review: "
        f"{model_version_link(config.tracking, name, version.version)}",
        artifacts=[str(card_file)],
        facts={**facts, "step": step, "model_id": info.model_id},
    )


def _registered_before(
    config: Config, client: Any, name: str, version: Any, step: int
) -> StageOutcome:
    """A retried task or a resumed run found its version: finish a registration a lost
    connection left half-made (no alias), or say what the version is now, alias read back."""
    from ffjobs.registry.client import CHALLENGER, PENDING, STATUS_TAG, version_by_alias
    from ffjobs.registry.publish import COMPLETE, REGISTRATION_TAG, complete_registration

    number = str(version.version)
    facts = _facts(config, name, number)
    status = version.tags.get(STATUS_TAG, PENDING)
    if version.tags.get(REGISTRATION_TAG) != COMPLETE and status == PENDING:
        complete_registration(client, name, number)
        return StageOutcome(
            STAGE,
            "passed",
            0.0,
            f"{name} version {number} (step {step}) was left without its alias when the "
            f"connection was lost; finished: it is the challenger, pending review: "
            f"{facts['link']}",
            facts={**facts, "step": step},
        )
    challenger = version_by_alias(client, name, CHALLENGER)
    if challenger is not None and str(challenger.version) == number:
        now = f"the challenger, {status}"
    else:
        now = f"{status}, not the challenger"
    summary = f"the model at step {step} is registered already: {name} version {number} ({now})"
    return StageOutcome(STAGE, "skipped", 0.0, summary, facts=facts)


def _registered_already(client: Any, name: str, run_id: str, step: int) -> Any | None:
    from mlflow.exceptions import MlflowException

    from ffjobs.registry.client import is_not_found

    try:
        versions = client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    except MlflowException as exc:
        if is_not_found(exc):
            return None
        raise
    return next((v for v in versions if v.tags.get(STEP_TAG) == str(step)), None)


def _facts(config: Config, name: str, version: str) -> dict[str, Any]:
    from ffjobs.tracking.ui_links import model_version_link

    return {
        "name": name,
        "version": str(version),
        "model_uri": f"models:/{name}/{version}",
        "link": model_version_link(config.tracking, name, version),
    }


def review_hint(facts: dict[str, Any], config: Config) -> list[str]:
    """What to do next with a registered challenger: where to look and the commands to run."""
    from ffjobs.config.tracking import TrackingConfig

    name, version = facts["name"], facts["version"]
    uri = config.tracking.tracking_uri
    store = "" if uri == TrackingConfig().tracking_uri else f" --set tracking.tracking_uri={uri}"
    ui = (
        facts["link"]
        if uri.startswith(("http://", "https://"))
        else f"mlflow ui --backend-store-uri {uri}, then Models -> {name} -> Version {version}"
    )
    return [
        f"model {name} version {version} is the challenger, pending review: {ui}",
        f"  compare:  ffjobs registry list {name}{store}",
        f"  try it:   ffjobs swap --model {facts['model_uri']} SOURCE.png TARGET.png OUT.png{store}",
        f'  decide:   ffjobs registry approve {name} {version} --reason "..."{store}'
        f"   (or: reject)",
    ]
