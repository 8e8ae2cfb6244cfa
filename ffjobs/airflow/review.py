"""The pipeline's review task: a person approves or rejects the registered challenger in Airflow.

:class:`ReviewOperator` is Airflow's ``ApprovalOperator`` (options Approve and Reject, and a
reason field) whose question is written when the task runs, from the run's record: the
evaluation table with the champion's figures beside it, the sample grid and the MLflow links.
The task then waits in ``awaiting_input`` (no worker, no pool slot) for an answer in the UI's
*Required actions* or through ``PATCH .../hitlDetails``, at most ``registry.review_timeout_h``.

The answer is applied by :func:`ffjobs.registry.review.decide`, exactly as ``ffjobs registry
approve|reject`` applies one, with the Airflow user who answered as the reviewer and the time of
the answer. No answer in time decides nothing: the version stays the challenger and the task
fails saying so. The task is never retried (a new try would ask again).

A waiting task runs nowhere, so nothing watches the registry meanwhile: a decision made through
``ffjobs registry`` while it waits is read when the task resumes (on the answer or at the
timeout), and the Airflow answer is then not applied; the task reports the earlier decision and
succeeds. A version decided before the question is written is not asked about at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ffjobs.config.tracking import TrackingConfig
from ffjobs.errors import UserError
from ffjobs.registry.review import (
    APPROVE,
    REASON_LIMIT,
    REJECT,
    Review,
    decide,
    decision_summary,
    earlier_decision,
)
from ffjobs.runs.run import Run
from ffjobs.tracking.redact import redact_document, redact_text

log = logging.getLogger(__name__)

REASON = "reason"
"""The review form's field for why, recorded on the version as ``review_reason``."""

SAMPLES_ARTIFACT = "evaluate/samples.png"
"""The sample grid in the run's MLflow artifacts (the evaluate stage's ``samples.png``)."""

DECISIONS = {ApprovalOperator.APPROVE: APPROVE, ApprovalOperator.REJECT: REJECT}


def reason_param() -> Param:
    # no minLength: Airflow validates a task's Params, default included, when the task starts;
    # an answer without a reason is refused when it arrives (reviewer_answer)
    return Param(
        "",
        type="string",
        maxLength=REASON_LIMIT,
        title="Reason",
        description="Required: why you approve or reject this version (recorded on it as "
        "review_reason)",
    )


class ReviewOperator(ApprovalOperator):
    """Ask a person to approve or reject the version the upstream register task registered.

    ``state``: the register task's XCom (the run directory, ``registered_name`` and
    ``registered_version``). The response timeout is the run's ``registry.review_timeout_h``;
    0 skips the task. Never retried."""

    template_fields = (*ApprovalOperator.template_fields, "state")

    def __init__(self, *, state: Any, **kwargs: Any):
        kwargs.setdefault("subject", "Approve the registered model as the champion?")
        # the form's one field; never retried: a new try would ask the question again
        kwargs.update(params={REASON: reason_param()}, retries=0)
        super().__init__(**kwargs)
        self.state = state

    def execute(self, context: Any) -> Any:
        run, client, name, version = self._version()
        hours = run.config.registry.review_timeout_h
        if not hours:
            raise AirflowSkipException(
                f"registry.review_timeout_h is 0: no review asked here; {name} version "
                f"{version} stays the challenger for: ffjobs registry approve|reject "
                f'{name} {version} --reason "..."'
            )
        earlier = earlier_decision(client, name, version)
        if earlier is not None:
            result = _earlier(name, version, earlier)
            log.info("%s", result["summary"])
            return redact_document(result)
        self.subject = f"Approve {name} version {version} as the champion?"
        self.body = redact_text(review_body(run, name, version))
        self.response_timeout = timedelta(hours=hours)
        return super().execute(context)  # waits in awaiting_input

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        run, client, name, version = self._version()
        try:
            if "error" not in event:
                reviewer_answer(event)  # a clear word on a missing reason before Airflow's
                super().execute_complete(context=context, event=event)
            result = conclude_review(
                client, name, version, event, timeout_h=run.config.registry.review_timeout_h
            )
        except UserError as exc:
            raise AirflowFailException(redact_text(f"review: {exc}")) from None
        log.info("%s", result["summary"])
        return redact_document(result)

    def _version(self) -> tuple[Run, Any, str, str]:
        from ffjobs.airflow.tasks import attach
        from ffjobs.tracking.mlflow_logger import mlflow_client

        run = attach(self.state)
        client = mlflow_client(run.config.tracking)
        return (
            run,
            client,
            str(self.state["registered_name"]),
            str(self.state["registered_version"]),
        )


def reviewer_answer(event: Mapping[str, Any]) -> tuple[str, Review]:
    """The decision and :class:`Review` (the Airflow user, the time of the answer, the reason)
    in a review task's answer; a UserError when it has no reason."""
    chosen = list(event.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in DECISIONS:
        raise UserError(f"the answer chose {chosen}; expected one of {list(DECISIONS)}")
    user = event.get("responded_by_user") or {}
    reviewer = str(user.get("name") or user.get("id") or "unknown Airflow user")
    reason = str((event.get("params_input") or {}).get(REASON) or "")
    if not reason.strip():
        raise UserError(
            f"{reviewer} answered {chosen[0]} without a reason, so nothing was recorded; "
            "clear this task to ask again, or decide with ffjobs registry approve|reject"
        )
    return DECISIONS[chosen[0]], Review(reviewer, reason, _utc(event.get("responded_at")))


def conclude_review(
    client: Any, name: str, version: str, event: Mapping[str, Any], *, timeout_h: float
) -> dict[str, Any]:
    """Apply the review task's ``event`` (the answer, or the timeout's error) to ``version``
    with :func:`decide`, unless the version was decided meanwhile (then that decision is
    reported and the answer is not applied). A timeout without a decision is a UserError."""
    earlier = earlier_decision(client, name, version)
    if "error" in event:
        if earlier is not None:
            return _earlier(name, version, earlier, why="no answer in Airflow")
        raise UserError(
            f"no answer within {timeout_h:g} h (registry.review_timeout_h): nothing is decided, "
            f"{name} version {version} stays the challenger, pending review; decide with: "
            f'ffjobs registry approve|reject {name} {version} --reason "..."'
        )
    decision, review = reviewer_answer(event)
    if earlier is not None:
        why = f"{review.reviewer}'s answer in Airflow ({decision}) was not applied"
        return _earlier(name, version, earlier, why=why)
    result = decide(client, name, version, decision, review)
    return {
        **result,
        "reviewed_by": review.reviewer,
        "reviewed_at": review.at,
        "review_reason": review.reason.strip(),
        "decided_here": True,
        "summary": f"{decision_summary(result)} ({review.reviewer}: {review.reason.strip()})",
    }


def _earlier(name: str, version: str, earlier: dict[str, str], why: str = "") -> dict[str, Any]:
    said = (
        f"{name} version {version} was {earlier['status']} by {earlier['reviewed_by']} at "
        f"{earlier['reviewed_at']} ({earlier['review_reason']}) before this review"
    )
    return {
        "name": name,
        "version": version,
        **earlier,
        "changed": False,
        "decided_here": False,
        "summary": f"{said}; {why}" if why else f"{said}; not asked again",
    }


def _utc(when: Any) -> str:
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    if not isinstance(when, datetime):
        when = datetime.now(UTC)
    return when.astimezone(UTC).isoformat(timespec="seconds")


def review_body(run: Run, name: str, version: str) -> str:
    """The review's question (Markdown): what was measured against the champion, the sample
    grid, where to look further and what each answer does."""
    from ffjobs.registry.model_card import evaluation_lines
    from ffjobs.runs.run import link
    from ffjobs.tracking.ui_links import model_version_link

    evaluation = run.facts("evaluate")
    champion = evaluation.get("champion") or None
    tracking = run.config.tracking
    grid = sample_grid_url(tracking, run.mlflow_run_id)
    rows = "source, target, this model's swap" + (", the champion's swap" if champion else "")
    samples = (
        [f"![sample grid: {rows}]({grid})", "", f"Rows: {rows}. [Full size]({grid})"]
        if grid
        else [f"Rows: {rows}: `{evaluation.get('samples', 'evaluate/samples.png')}`"]
    )
    run_link = link(run)
    approve = (
        f"**Approve** moves the alias `champion` to version {version} (version "
        f"{champion['version']} is tagged `replaced_by`)"
        if champion
        else f"**Approve** makes version {version} the first `champion`"
    )
    lines = [
        f"Run `{run.key}` registered **{name} version {version}** as the challenger.",
        "",
        *evaluation_lines(evaluation),
        "",
        "## Samples",
        *samples,
        "",
        "## Links",
        f"- This version in MLflow: {model_version_link(tracking, name, version)}",
        *([f"- The run in MLflow: {run_link}"] if run_link else []),
        f"- Model card: the version's description; run key `{run.key}`",
        "",
        "## Your answer",
        f"{approve}; **Reject** tags it rejected and leaves the champion alone. Both record "
        "your Airflow user, the time and your reason on the version, as `ffjobs registry` does. "
        "A decision made with `ffjobs registry approve|reject` meanwhile takes precedence: "
        "this answer is then not applied.",
    ]
    return "\n".join(lines) + "\n"


def sample_grid_url(tracking: TrackingConfig, run_id: str | None) -> str | None:
    """The sample grid's address on the MLflow server (an image a browser shows), or None when
    the tracking store is no server."""
    uri = redact_text(tracking.tracking_uri.rstrip("/"))
    if run_id is None or not uri.startswith(("http://", "https://")):
        return None
    return f"{uri}/get-artifact?path={SAMPLES_ARTIFACT}&run_uuid={run_id}"
