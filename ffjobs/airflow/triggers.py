"""The trigger that watches one SLURM job of a run for a deferred task (training, preflight).

:class:`SlurmJobTrigger` polls the job (one ``sacct`` call per poll, :class:`~ffjobs.airflow.
hooks.SlurmHook`), cancels a training job whose rank reported a failure but that SLURM cannot
end yet (the same :class:`~ffjobs.slurm.rank_failures.EndWatch` as the blocking supervisor; a
watch without the job's ``folder`` leaves that out: the preflight's ranks report no such
failures, their job ends by its own time limit), and yields one event when the job has ended.
It never submits anything: the triggerer runs ``run()`` again from the start after every
restart, and the operator alone submits.

On kill (a person marked the deferred task failed or success, or cleared it) it cancels the job,
noting beside the job's logs that an Airflow kill did (:mod:`ffjobs.slurm.cancels`: the attempt
is then recorded as cancelled, never retried), but only a job that still belongs to it: the run's owner file must name the job, the try that
deferred to this trigger and this very run of the trigger. A trigger whose triggerer lost its
heartbeat and whose work moved to another triggerer (which then claimed the job), or one whose
kill arrives after a later try re-attached to the job, cancels nothing. ``cleanup`` cancels
nothing either: it runs on every exit, restarts included.

Nothing here imports torch, MLflow or submitit: the triggerer loads this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ffjobs.airflow.hooks import SlurmHook, claim_watch, owns
from ffjobs.slurm.accounting import AccountingError
from ffjobs.slurm.cancels import leave_note
from ffjobs.slurm.jobstate import JobState, JobStatus
from ffjobs.slurm.rank_failures import Ended, EndWatch

ACCOUNTING_LAG_S = 600.0
"""Accounting that has not heard of the job this long after the watch began: the trigger hands
the question to the operator (whose poll also asks the controller) instead of waiting on."""


def status_payload(status: JobStatus) -> dict[str, Any]:
    out = dataclasses.asdict(status)
    out["state"] = status.state.value
    out["nodes"] = list(status.nodes)
    return out


def status_from_payload(payload: dict[str, Any]) -> JobStatus:
    return JobStatus(
        **{**payload, "state": JobState(payload["state"]), "nodes": tuple(payload["nodes"])}
    )


class SlurmJobTrigger(BaseTrigger):
    """Watch SLURM job ``job_id`` (attempt ``attempt`` of its stage in the run) to its end.

    ``folder``: the job's submitit folder, where ranks leave failure reports (None: no rank
    failure watch, so no early cancel). ``token``: the try that deferred here, as the stage's
    owner file (``owner_file``) records it. The event:
    ``{"job_id", "attempt", "submitted_at", "token", "status", "unconfirmed"}`` where
    ``status`` is the ended job's status (None when accounting never heard of the job) and
    ``unconfirmed`` the nodes that never confirmed the end of a job this trigger cancelled.
    """

    def __init__(
        self,
        *,
        job_id: str,
        attempt: int,
        submitted_at: float,
        folder: str | None,
        owner_file: str,
        token: str,
        poll_s: float = 10.0,
    ):
        super().__init__()
        self.job_id, self.attempt, self.submitted_at = str(job_id), int(attempt), submitted_at
        self.folder, self.owner_file, self.token = folder, owner_file, token
        self.poll_s = poll_s
        self.watcher = uuid.uuid4().hex
        """This run of the trigger (a restarted triggerer builds a new one)."""
        self.hook = SlurmHook()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "attempt": self.attempt,
                "submitted_at": self.submitted_at,
                "folder": self.folder,
                "owner_file": self.owner_file,
                "token": self.token,
                "poll_s": self.poll_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await asyncio.to_thread(claim_watch, self.owner_file, self.job_id, self.token, self.watcher)
        watch, began = EndWatch(), time.monotonic()
        while True:
            reports: list[dict[str, Any]] = []
            try:
                ended = await self._poll(watch, reports)
            except AccountingError as exc:  # slurmdbd down for a moment: the next poll may do
                self.log.warning("job %s: %s", self.job_id, exc)
                ended = None
            if isinstance(ended, Ended):
                yield self._event(ended.status, ended.unconfirmed)
                return
            if ended == "unknown" and time.monotonic() - began > ACCOUNTING_LAG_S:
                yield self._event(None, ())
                return
            await asyncio.sleep(watch.interval(self.poll_s, reports))

    async def _poll(self, watch: EndWatch, reports: list[dict[str, Any]]) -> Ended | str | None:
        status = await self.hook.status(self.job_id)
        if status is None:
            return "unknown"
        if not watch.cancelled:
            if not status.is_terminal and self.folder is not None:
                reports += await self.hook.failure_reports(self.folder, self.job_id)
            step = watch.before_cancel(status, reports, time.time())
            if step == "cancel":
                self.log.warning(
                    "job %s: rank %s reported a failure; cancelling the job",
                    self.job_id,
                    reports[0].get("task"),
                )
                why = f"task {reports[0].get('task')} reported {reports[0].get('error')}"[:200]
                await asyncio.to_thread(leave_note, self.folder, self.job_id, "ffjobs", why,
                                        ours=True)  # fmt: skip
                await self.hook.cancel(self.job_id)
            return step if isinstance(step, Ended) else None
        pending = await self.hook.nodes_still_completing(self.job_id)
        step = watch.after_cancel(status, pending, time.time())
        return step if isinstance(step, Ended) else None

    def _event(self, status: JobStatus | None, unconfirmed: tuple[str, ...]) -> TriggerEvent:
        return TriggerEvent(
            {
                "job_id": self.job_id,
                "attempt": self.attempt,
                "submitted_at": self.submitted_at,
                "token": self.token,
                "status": status_payload(status) if status is not None else None,
                "unconfirmed": list(unconfirmed),
            }
        )

    async def on_kill(self) -> None:
        """A person moved the task out of deferral: cancel the job, if it is still ours."""
        mine = await asyncio.to_thread(owns, self.owner_file, self.job_id, self.token, self.watcher)
        if not mine:
            self.log.info("job %s is not this trigger's to cancel any more", self.job_id)
            return
        self.log.warning("task killed: cancelling SLURM job %s", self.job_id)
        if self.folder is not None:
            await asyncio.to_thread(leave_note, self.folder, self.job_id, self._killed())
        await self.hook.cancel(self.job_id)

    def _killed(self) -> str:
        """What cancelled the job, as its attempt will say: the Airflow kill of which task."""
        ti = getattr(self, "task_instance", None)  # set by the triggerer that runs us
        names = [getattr(ti, name, None) for name in ("dag_id", "task_id", "run_id")]
        if not all(names):
            return "an Airflow kill of the task"
        dag, task, run = names
        return f"an Airflow kill of task {dag}.{task} (run {run})"
