"""The training task: on the worker for the local profile, and on SLURM without holding a worker.

With ``slurm.executor: local`` (the embedded default) :class:`TrainOperator` trains on the
worker, as the other stages run. With ``slurm.executor: slurm`` it is the deferring driver of a run's training on SLURM (the CLI's
``ffjobs train --submit --wait`` is the blocking one; both take their steps from
:class:`~ffjobs.train.on_slurm.SlurmTraining` and their decisions from
:func:`~ffjobs.slurm.supervisor.decide`):

* ``execute`` re-attaches or submits, then defers to :class:`~ffjobs.airflow.triggers.
  SlurmJobTrigger`. Re-attach first: a job of the run that no attempt record accounts for
  (the job id kept in the task state store right after ``sbatch``, the run record, or SLURM
  accounting by the run's name, which finds a job whose submitter died before it could write
  its id anywhere) is watched, never duplicated; one that ended meanwhile is read as it ended.
* ``execute_complete`` reads the ended job's result (logs, checkpoints, accounting), records
  its attempts, and asks the decision: the next attempt is submitted with its backoff as a
  start time (``sbatch --begin``: no sleeping in a worker) and watched again; or the stage
  succeeds; or it fails for good (``AirflowFailException``: a failure no retry can change, or
  the run's attempt budget spent). The budget is the run's, counted from its attempt records:
  an Airflow retry of this task continues it and never starts a new one.
* A defer timeout or a crashed trigger cancels the job (the trigger's ``on_kill`` covers a
  person's kill, mark failed or success, or clear).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk import NEVER_EXPIRE, BaseOperator
from airflow.sdk.exceptions import (
    AirflowFailException,
    TaskDeferralError,
    TaskDeferralTimeout,
)

from ffjobs.airflow.hooks import owner_file, read_owner, write_owner
from ffjobs.airflow.links import AttemptLogsLink, MlflowRunLink
from ffjobs.airflow.tasks import attach, conclude
from ffjobs.airflow.triggers import SlurmJobTrigger, status_from_payload

STORE_KEY = "slurm_job"
"""The task state store's key for the job this task watches (kept across tries)."""


class TrainOperator(BaseOperator):
    """Train the run handed down in ``state`` (the previous task's XCom): on SLURM, deferred.

    ``poll_s``: seconds between the trigger's polls of the job. ``watch_timeout``: the longest
    one job may be watched (None: no limit); past it the job is cancelled and the task fails.
    """

    template_fields = ("state",)
    operator_extra_links = (MlflowRunLink(), AttemptLogsLink())

    def __init__(
        self,
        *,
        state: Any,
        poll_s: float = 10.0,
        watch_timeout: timedelta | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.state, self.poll_s, self.watch_timeout = state, poll_s, watch_timeout

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from ffjobs.airflow.tasks import train

        run = attach(self.state)
        if run.config.slurm.executor != "slurm":
            return train(self.state)
        training = self._training(run)
        self._note_start(context, training)
        kept = context["task_state_store"].get(STORE_KEY) or {}
        pending = training.unaccounted(known=kept.get("job_id"))
        if pending is not None:
            number, job_id = pending
            submitted_at = kept.get("submitted_at") if kept.get("job_id") == job_id else None
            training.run.echo(f"re-attaching to SLURM job {job_id} (attempt {number})")
            self._watch(context, training, number, job_id, submitted_at or time.time())
        supervision = training.supervision()
        return self._next(context, training, supervision, supervision.start())

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        from ffjobs.slurm.jobstate import poll_jobs

        training = self._training(attach(self.state))
        job_id, number = str(event["job_id"]), int(event["attempt"])
        if event.get("status") is None:  # accounting never heard of it: ask every source once
            status = poll_jobs([job_id])[job_id]
        else:
            status = status_from_payload(event["status"])
        result = training.backend.ended(
            number, job_id, status, float(event["submitted_at"]), tuple(event["unconfirmed"])
        )
        supervision = training.supervision()
        return self._next(context, training, supervision, training.account(supervision, result))

    def resume_execution(
        self, next_method: str, next_kwargs: dict[str, Any] | None, context: Mapping[str, Any]
    ) -> Any:
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError) as exc:
            self._cancel_watched(context, f"the watch ended without an answer ({exc})")
            raise AirflowFailException(
                f"train: the watch of the SLURM job ended without its result ({exc}); the job "
                "was cancelled"
            ) from None

    def _training(self, run: Any) -> Any:
        from ffjobs.train.on_slurm import SlurmTraining
        from ffjobs.train.stage import run_train_job

        return SlurmTraining(run.config, run, run_train_job(run.config, run))

    def _next(
        self, context: Mapping[str, Any], training: Any, supervision: Any, decision: Any
    ) -> dict[str, Any]:
        from ffjobs.runs.stages import record_stage
        from ffjobs.slurm.supervisor import Retry, Stop

        if isinstance(decision, Retry):
            number, job_id = training.submit(supervision, decision)
            self._watch(context, training, number, job_id, time.time() + decision.delay_s)
        outcome = training.outcome(supervision.outcome(decision))
        started = context["task_state_store"].get("started_at") or time.time()
        record_stage(training.run, outcome, time.time() - float(started))
        context["task_state_store"].delete("started_at")
        if isinstance(decision, Stop) and not _worth_a_retry(supervision):
            # the run's budget is spent or the failure is final: an Airflow retry would only
            # find the same answer, so none is made
            from ffjobs.runs.run import finish_run
            from ffjobs.tracking.redact import redact_text

            finish_run(training.run, "FAILED", end_tracking=True)
            raise AirflowFailException(redact_text(f"train failed: {outcome.summary}"))
        return conclude(training.run, outcome)

    def _watch(
        self, context: Mapping[str, Any], training: Any, number: int, job_id: str, at: float
    ) -> None:
        """Keep the job as this try's, then defer to its trigger (raises ``TaskDeferred``)."""
        from submitit.core.utils import JobPaths

        from ffjobs.slurm.executor import job_folder

        ti = context["ti"]
        token = f"{ti.try_number}:{secrets.token_hex(8)}"
        kept = {"job_id": job_id, "attempt": number, "submitted_at": at, "token": token}
        context["task_state_store"].set(STORE_KEY, kept, retention=NEVER_EXPIRE)
        owner = owner_file(training.run.dir)
        write_owner(owner, {"job_id": job_id, "token": token})
        ti.xcom_push(key="slurm_job_id", value=job_id)
        base = job_folder(training.config.slurm.folder, training.run.key, number)
        folder = JobPaths(base, job_id=job_id).folder.resolve()
        AttemptLogsLink().keep(context, folder.as_uri())
        trigger = SlurmJobTrigger(
            job_id=job_id,
            attempt=number,
            submitted_at=at,
            folder=str(folder),
            owner_file=str(owner.resolve()),
            token=token,
            poll_s=self.poll_s,
        )
        self.defer(trigger=trigger, method_name="execute_complete", timeout=self.watch_timeout)

    def _note_start(self, context: Mapping[str, Any], training: Any) -> None:
        store = context["task_state_store"]
        if store.get("started_at") is None:
            store.set("started_at", time.time(), retention=NEVER_EXPIRE)
        from ffjobs.tracking.mlflow_logger import run_link

        run = training.run
        MlflowRunLink().keep(context, run_link(run.config.tracking, run.mlflow_run_id))

    def _cancel_watched(self, context: Mapping[str, Any], why: str) -> None:
        from ffjobs.slurm import rank_failures

        kept = context["task_state_store"].get(STORE_KEY) or {}
        job_id = kept.get("job_id")
        run = attach(self.state)
        if job_id and read_owner(owner_file(run.dir)).get("token") == kept.get("token"):
            run.echo(f"cancelling SLURM job {job_id}: {why}")
            rank_failures.cancel(str(job_id))

    def on_kill(self) -> None:
        """Killed on the worker (before it deferred): nothing runs here that owns a job; the
        job a try submitted is found again by the next try (task state store, run record,
        SLURM accounting) or cancelled by its trigger's ``on_kill``."""


def _worth_a_retry(supervision: Any) -> bool:
    """Whether an Airflow retry could end otherwise: only when the last attempt failed
    retryably within the budget but too few nodes were left (nodes may come back)."""
    last = supervision.records[-1] if supervision.records else None
    if last is None or last.kind is None or not last.retryable:
        return False
    return len(supervision.records) < supervision.policy.max_attempts
