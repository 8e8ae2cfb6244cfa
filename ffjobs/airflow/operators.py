"""The training and preflight tasks: on the worker for the local profile, and on SLURM without
holding a worker.

With ``slurm.executor: local`` (the embedded default) :class:`TrainOperator` and
:class:`PreflightOperator` run their stage on the worker, as the other stages run. With
``slurm.executor: slurm`` each is the deferring driver of its stage's SLURM job; both watch it
through :class:`~ffjobs.airflow.triggers.SlurmJobTrigger` and share how (:class:`SlurmStageOperator`:
the job kept in the task state store and in the stage's owner file, the deferral, the cancel of a
watch that ended without an answer).

:class:`TrainOperator` (the CLI's ``ffjobs train --submit --wait`` is the blocking driver; both
take their steps from :class:`~ffjobs.train.on_slurm.SlurmTraining` and their decisions from
:func:`~ffjobs.slurm.supervisor.decide`):

* ``execute`` re-attaches or submits, then defers to :class:`~ffjobs.airflow.triggers.
  SlurmJobTrigger`. Re-attach first: a job of the run that no attempt record accounts for
  (the job id kept in the task state store right after ``sbatch``, the run record, or SLURM
  accounting by the run's name, which finds a job whose submitter died before it could write
  its id anywhere) is watched, never duplicated; one that ended meanwhile is read as it ended,
  by ``execute`` itself (below: why no trigger is deferred to for it).
* ``execute_complete`` reads the ended job's result (logs, checkpoints, accounting), records
  its attempts, and asks the decision: the next attempt is submitted with its backoff as a
  start time (``sbatch --begin``: no sleeping in a worker) and watched again; or the stage
  succeeds; or it fails for good (``AirflowFailException``: a failure no retry can change, or
  the run's attempt budget spent). The budget is the run's, counted from its attempt records:
  an Airflow retry of this task continues it and never starts a new one.
* A defer timeout or a crashed trigger cancels the job (the trigger's ``on_kill`` covers a
  person's kill, mark failed or success, or clear, and notes that an Airflow kill cancelled
  it). A cancelled attempt is never retried; a later try (a clear) or a DAG run that resumes the
  run reads it, records it as cancelled and goes on from the newest verified checkpoint.

:class:`PreflightOperator` (the CLI's ``ffjobs preflight`` is the blocking driver; both take
their steps from :mod:`ffjobs.preflight.launch` and :mod:`ffjobs.preflight.runner`):

* ``execute`` re-attaches to the run's preflight job whose result was never read (kept in the
  task state store, noted in its preflight folder right after ``sbatch``, or found in SLURM
  accounting by the run's preflight job name), or prepares a new preflight folder and submits
  its job; then defers. A job found ended is read by ``execute`` itself. A job found cancelled
  (a kill, a clear or a watch timeout ended it unread) says nothing of the fabric: its report
  says so, and a new preflight replaces it.
* ``execute_complete`` reads the ended job into the preflight's report and records the stage
  as the plain task did: a FAIL verdict (one training cannot avoid by excluding nodes) fails
  the task for good. There is no retry of a preflight job, as on the CLI: an Airflow retry of
  the task reads the job its failed try left, or submits one if that try left none.

Why a job found ended is never deferred to a trigger: Airflow 3.3's scheduler fails a task
whose trigger fires before the scheduler has drained the executor's report of the deferral
(``finished with state success, but the task instance's state attribute is queued``:
apache/airflow#67287, #72716), and a trigger watching an ended job fires on its first poll.
A job that ends within seconds of its deferral (a preflight on a small cluster) can meet that
race; the DAG gives both tasks a retry, which then reads the ended job here.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from airflow.sdk import NEVER_EXPIRE, BaseOperator
from airflow.sdk.exceptions import (
    AirflowFailException,
    TaskDeferralError,
    TaskDeferralTimeout,
)

from ffjobs.airflow.hooks import owner_file, read_owner, write_owner
from ffjobs.airflow.links import AttemptLogsLink, MlflowRunLink
from ffjobs.airflow.tasks import attach, conclude, stage_errors
from ffjobs.airflow.triggers import SlurmJobTrigger, status_from_payload

STORE_KEY = "slurm_job"
"""The task state store's key for the job this task watches (kept across tries)."""


class SlurmStageOperator(BaseOperator):
    """What the deferring drivers of a stage's SLURM job share (``stage``: the stage's name).

    ``poll_s``: seconds between the trigger's polls of the job. ``watch_timeout``: the longest
    one job may be watched (None: no limit); past it the job is cancelled and the task fails.
    """

    stage = ""
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

    def resume_execution(
        self, next_method: str, next_kwargs: dict[str, Any] | None, context: Mapping[str, Any]
    ) -> Any:
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError) as exc:
            self._cancel_watched(context, f"the watch ended without an answer ({exc})")
            raise AirflowFailException(
                f"{self.stage}: the watch of the SLURM job ended without its result ({exc}); "
                "the job was cancelled"
            ) from None

    def _defer_to(
        self,
        context: Mapping[str, Any],
        run: Any,
        *,
        job_id: str,
        attempt: int,
        submitted_at: float,
        logs: Path,
        rank_failures: bool,
    ) -> NoReturn:
        """Keep the job as this try's, then defer to its trigger (raises ``TaskDeferred``).

        ``logs``: the job's log folder (linked from the task); ``rank_failures``: whether its
        ranks leave failure reports there for the trigger's early cancel."""
        ti = context["ti"]
        token = f"{ti.try_number}:{secrets.token_hex(8)}"
        kept = {"job_id": job_id, "attempt": attempt, "submitted_at": submitted_at, "token": token}
        context["task_state_store"].set(STORE_KEY, kept, retention=NEVER_EXPIRE)
        owner = owner_file(run.dir, self.stage)
        write_owner(owner, {"job_id": job_id, "token": token})
        ti.xcom_push(key="slurm_job_id", value=job_id)
        folder = logs.resolve()
        AttemptLogsLink().keep(context, folder.as_uri())
        trigger = SlurmJobTrigger(
            job_id=job_id,
            attempt=attempt,
            submitted_at=submitted_at,
            folder=str(folder) if rank_failures else None,
            owner_file=str(owner.resolve()),
            token=token,
            poll_s=self.poll_s,
        )
        self.defer(trigger=trigger, method_name="execute_complete", timeout=self.watch_timeout)

    def _note_start(self, context: Mapping[str, Any], run: Any) -> None:
        store = context["task_state_store"]
        if store.get("started_at") is None:
            store.set("started_at", time.time(), retention=NEVER_EXPIRE)
        from ffjobs.tracking.ui_links import run_link

        MlflowRunLink().keep(context, run_link(run.config.tracking, run.mlflow_run_id))

    def _record(self, context: Mapping[str, Any], run: Any, outcome: Any) -> Any:
        """Record the stage's ``outcome``, timed from this stage's first start in the task."""
        from ffjobs.runs.stages import record_stage

        started = context["task_state_store"].get("started_at") or time.time()
        record_stage(run, outcome, time.time() - float(started))
        context["task_state_store"].delete("started_at")
        return outcome

    def _cancel_watched(self, context: Mapping[str, Any], why: str) -> None:
        from ffjobs.slurm import cancels

        kept = context["task_state_store"].get(STORE_KEY) or {}
        job_id = kept.get("job_id")
        run = attach(self.state)
        if job_id and read_owner(owner_file(run.dir, self.stage)).get("token") == kept.get("token"):
            run.echo(f"cancelling SLURM job {job_id}: {why}")
            by = f"ffjobs ({self.stage} task: the watch ended without an answer)"
            cancels.cancel(str(job_id), self._job_folder(run, kept), by, why[:200])

    def _job_folder(self, run: Any, kept: Mapping[str, Any]) -> Path | None:
        """The folder of the kept job's logs, where a note of its cancel goes (None: none)."""
        return None

    def on_kill(self) -> None:
        """Killed on the worker (before it deferred): nothing runs here that owns a job; the
        job a try submitted is found again by the next try (task state store, the run's own
        records, SLURM accounting) or cancelled by its trigger's ``on_kill``."""


class TrainOperator(SlurmStageOperator):
    """Train the run handed down in ``state`` (the previous task's XCom): on SLURM, deferred."""

    stage = "train"

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from ffjobs.airflow.tasks import train
        from ffjobs.slurm.jobstate import poll_jobs

        run = attach(self.state)
        if run.config.slurm.executor != "slurm":
            return train(self.state)
        training = self._training(run)
        self._note_start(context, training.run)
        kept = context["task_state_store"].get(STORE_KEY) or {}
        pending = training.read_cancelled(training.unaccounted(known=kept.get("job_id")))
        if pending is not None:
            number, job_id = pending
            submitted_at = kept.get("submitted_at") if kept.get("job_id") == job_id else None
            status = poll_jobs([job_id])[job_id]
            if status.is_terminal:  # never deferred to a trigger that would fire at once
                training.run.echo(f"SLURM job {job_id} (attempt {number}) ended while nobody "
                                  f"watched it ({status.state.value}); reading it")  # fmt: skip
                return self._read(context, training, number, job_id, status,
                                  submitted_at or time.time(), ())  # fmt: skip
            training.run.echo(f"re-attaching to SLURM job {job_id} (attempt {number})")
            self._watch(context, training, number, job_id, submitted_at or time.time())
        supervision = training.supervision()
        return self._next(context, training, supervision, supervision.start())

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        training = self._training(attach(self.state))
        job_id = str(event["job_id"])
        return self._read(context, training, int(event["attempt"]), job_id,
                          _event_status(event), float(event["submitted_at"]),
                          tuple(event["unconfirmed"]))  # fmt: skip

    def _read(
        self,
        context: Mapping[str, Any],
        training: Any,
        number: int,
        job_id: str,
        status: Any,
        submitted_at: float,
        unconfirmed: tuple[str, ...],
    ) -> dict[str, Any]:
        """Read attempt ``number``'s ended job and go on as the decision after it says."""
        result = training.backend.ended(number, job_id, status, submitted_at, unconfirmed)
        supervision = training.supervision()
        return self._next(context, training, supervision, training.account(supervision, result))

    def _job_folder(self, run: Any, kept: Mapping[str, Any]) -> Path | None:
        from submitit.core.utils import JobPaths

        from ffjobs.slurm.executor import job_folder

        if kept.get("attempt") is None:
            return None
        base = job_folder(run.config.slurm.folder, run.key, int(kept["attempt"]))
        return JobPaths(base, job_id=str(kept["job_id"])).folder

    def _training(self, run: Any) -> Any:
        from ffjobs.train.on_slurm import SlurmTraining
        from ffjobs.train.stage import run_train_job

        return SlurmTraining(run.config, run, run_train_job(run.config, run))

    def _next(
        self, context: Mapping[str, Any], training: Any, supervision: Any, decision: Any
    ) -> dict[str, Any]:
        from ffjobs.slurm.supervisor import Retry, Stop

        if isinstance(decision, Retry):
            number, job_id = training.submit(supervision, decision)
            self._watch(context, training, number, job_id, time.time() + decision.delay_s)
        outcome = training.outcome(supervision.outcome(decision))
        self._record(context, training.run, outcome)
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

        base = job_folder(training.config.slurm.folder, training.run.key, number)
        folder = JobPaths(base, job_id=job_id).folder
        self._defer_to(context, training.run, job_id=job_id, attempt=number, submitted_at=at,
                       logs=folder, rank_failures=True)  # fmt: skip


class PreflightOperator(SlurmStageOperator):
    """Check the fabric for the run handed down in ``state`` (the previous task's XCom): on
    SLURM, deferred while the preflight's job queues and runs."""

    stage = "preflight"

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        from ffjobs.airflow.tasks import preflight
        from ffjobs.runs.run import StageOutcome

        run = attach(self.state)
        if run.config.slurm.executor != "slurm" or not run.config.preflight.enabled:
            return preflight(self.state)
        self._note_start(context, run)
        kept = context["task_state_store"].get(STORE_KEY) or {}
        with stage_errors(run, self.stage):
            pending = self._reattach(run, kept.get("job_id"))
        if pending is not None:
            job_id, folder, status = pending
            if status.is_terminal:  # never deferred to a trigger that would fire at once
                run.echo(f"SLURM job {job_id} ended while nobody watched it "
                         f"({status.state.value}); reading it")  # fmt: skip
                return self._read(context, run, job_id, status)
            run.echo(f"re-attaching to SLURM job {job_id} (preflight in {folder})")
            self._watch(context, run, job_id, folder)
        with stage_errors(run, self.stage):
            submitted = self._submit(run)
        if isinstance(submitted, StageOutcome):  # sbatch said no: the report says why
            return conclude(run, self._record(context, run, submitted))
        self._watch(context, run, *submitted)

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        run = attach(self.state)
        with stage_errors(run, self.stage):
            status = _event_status(event)
        return self._read(context, run, str(event["job_id"]), status)

    def _read(self, context: Mapping[str, Any], run: Any, job_id: str, status: Any) -> Any:
        """Read the preflight's job into its report and the stage's outcome; or, when
        accounting lost sight of a job the controller still runs, watch it on."""
        from ffjobs.preflight.launch import noted_folder
        from ffjobs.preflight.runner import read_slurm_job
        from ffjobs.preflight.stage import preflight_outcome

        with stage_errors(run, self.stage):
            folder = noted_folder(run.stage_dir(self.stage), job_id)
            if folder is None:
                raise RuntimeError(f"no preflight folder of run {run.key} notes SLURM job {job_id}")
            ended = status.is_terminal or status.source == "none"
            if ended:
                report = read_slurm_job(run.config, folder, run.key, status)
                outcome = preflight_outcome(run.config, report)
        if not ended:  # accounting lost sight of a job the controller still runs: watch on
            self._watch(context, run, job_id, folder)
        return conclude(run, self._record(context, run, outcome))

    def _reattach(self, run: Any, known: str | None) -> tuple[str, Path, Any] | None:
        """The run's preflight job whose result was never read: (job id, its folder, its
        status); None if none (or it was cancelled unread, which a new preflight replaces)."""
        from ffjobs.preflight.launch import unaccounted_job
        from ffjobs.preflight.runner import read_slurm_job
        from ffjobs.slurm.jobstate import JobState, poll_jobs

        pending = unaccounted_job(run.config, run.key, run.stage_dir(self.stage), known)
        if pending is None:
            return None
        job_id, folder = pending
        status = poll_jobs([job_id])[job_id]
        if status.state is JobState.CANCELLED:
            read_slurm_job(run.config, folder, run.key, status)  # its folder says what became of it
            run.echo(f"SLURM job {job_id} was cancelled before its result was read; "
                     "a new preflight replaces it")  # fmt: skip
            return None
        return job_id, folder, status

    def _submit(self, run: Any) -> tuple[str, Path] | Any:
        """A new preflight of the run submitted: (job id, its folder); or, when sbatch said no,
        the stage's outcome (its report names sbatch's reason)."""
        from ffjobs.preflight.launch import SubmissionFailed, submit_slurm
        from ffjobs.preflight.runner import finish, prepare
        from ffjobs.preflight.stage import preflight_dir, preflight_outcome

        folder = preflight_dir(run)
        prepare(run.config, folder, local=False)
        try:
            return submit_slurm(run.config, folder, run.key), folder
        except SubmissionFailed as exc:
            report = finish(run.config, folder, str(exc), mode=run.config.slurm.executor)
            return preflight_outcome(run.config, report)

    def _watch(self, context: Mapping[str, Any], run: Any, job_id: str, folder: Path) -> NoReturn:
        from ffjobs.preflight.launch import job_logs, read_job_note

        note = read_job_note(folder)
        attempt = int(note["attempt"])
        self._defer_to(context, run, job_id=job_id, attempt=attempt,
                       submitted_at=float(note.get("launched_at") or time.time()),
                       logs=job_logs(run.config, run.key, attempt, job_id),
                       rank_failures=False)  # fmt: skip


def _event_status(event: Mapping[str, Any]) -> Any:
    """The ended job's status a trigger's ``event`` carries."""
    from ffjobs.slurm.jobstate import poll_jobs

    if event.get("status") is None:  # accounting never heard of it: ask every source once
        return poll_jobs([str(event["job_id"])])[str(event["job_id"])]
    return status_from_payload(event["status"])


def _worth_a_retry(supervision: Any) -> bool:
    """Whether an Airflow retry could end otherwise: only when the last attempt failed
    retryably within the budget but too few nodes were left (nodes may come back)."""
    last = supervision.records[-1] if supervision.records else None
    if last is None or last.kind is None or not last.retryable:
        return False
    return len(supervision.records) < supervision.policy.max_attempts
