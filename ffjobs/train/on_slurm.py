"""A run's training on SLURM, one step at a time, for both of its drivers.

:class:`SlurmTraining` holds what the blocking driver of the CLI (``ffjobs train --submit
--wait``, :func:`train_on_slurm`) and the deferring Airflow operator
(:mod:`ffjobs.airflow.operators`) share: the run's attempt budget counted from its attempt
records (``<run>/train/attempts.jsonl``), the job that no record accounts for yet (found in the
run record, where every job id goes right after ``sbatch``, and in SLURM accounting by the run's
name), the submission of the next attempt, and the accounting of an attempt that ended. The
decision between attempts is :func:`ffjobs.slurm.supervisor.decide`'s.

A job of the run that a person cancelled while nobody watched it (an Airflow kill, Ctrl-C
twice, ``scancel`` of a job submitted without ``--wait``) is read and recorded as cancelled
before a driver starts (:meth:`SlurmTraining.read_cancelled`): a start is a person's explicit
act (``ffjobs run --resume``, a cleared or resumed Airflow task), and it goes on after the
cancel from the newest verified checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ffjobs.config import Config
from ffjobs.errors import FAILURE_EXIT_CODES, ExitCode, failure_exit_code
from ffjobs.runs.run import Run, StageOutcome
from ffjobs.slurm.jobstate import submission_order
from ffjobs.slurm.supervisor import (
    AttemptResult,
    Decision,
    Retry,
    RetryPolicy,
    SupervisedOutcome,
    Supervision,
    supervise,
)
from ffjobs.train.attempts import attempt_records, attempts_file, record_attempt
from ffjobs.train.job import TrainJob
from ffjobs.train.slurm_job import SlurmAttempts, run_jobs


def retry_policy(config: Config) -> RetryPolicy:
    slurm = config.slurm
    return RetryPolicy(
        max_attempts=slurm.max_attempts,
        backoff_s=slurm.retry_backoff_s,
        backoff_max_s=slurm.retry_backoff_max_s,
    )


@dataclass
class SlurmTraining:
    """Training ``run`` on SLURM with ``job``: the steps both drivers take."""

    config: Config
    run: Run
    job: TrainJob
    backend: SlurmAttempts = field(init=False)

    def __post_init__(self) -> None:
        self.backend = SlurmAttempts(
            self.config, self.run.key, self.job, on_submitted=self._submitted
        )

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """``run.json``'s ``slurm_jobs``: every job submitted for the run, in order."""
        return self.run.record.setdefault("slurm_jobs", [])

    def supervision(self) -> Supervision:
        """The run's attempts so far and its policy; nodes the preflight failed and
        ``slurm.exclude`` are left out from the first attempt on."""
        exclude = (*self.config.slurm.exclude, *self.run.facts("preflight").get("exclude", []))
        return Supervision(
            retry_policy(self.config), self.config.slurm.nodes, tuple(exclude),
            attempt_records(self.run), self.backend.usable_nodes,
        )  # fmt: skip

    def unaccounted(self, known: str | None = None) -> tuple[int, str] | None:
        """(attempt, job id) of the newest job of the run that no attempt record accounts for:
        one still queued or running, or one that ended while nobody supervised it. ``known``: a
        job id the caller kept (Airflow's task state store). Looked for in the run record and,
        for a job whose id was never recorded (the submitter died right after ``sbatch``), in
        SLURM accounting by the run's name."""
        recorded = {entry.job_id for entry in attempt_records(self.run)}
        candidates = [j["job_id"] for j in self.jobs]
        if known:
            candidates.append(str(known))
        candidates += run_jobs(self.run.key)
        for job_id in sorted(set(candidates), key=submission_order, reverse=True):
            if job_id in recorded:
                return None  # the newest job is accounted for: nothing left to read
            held, number = self.backend.finish_held(job_id)
            if held and number is None:
                continue  # left held without its task, so cancelled: it never was an attempt
            number = number or self.backend.attempt_of(job_id) or self._recorded_attempt(job_id)
            if number is not None:
                if job_id not in {j["job_id"] for j in self.jobs}:
                    self._submitted(number, job_id)
                return number, job_id
        return None

    def read_cancelled(self, pending: tuple[int, str] | None) -> tuple[int, str] | None:
        """``pending`` (:meth:`unaccounted`), unless it is a job a person cancelled while
        nobody watched it: that one is read and recorded now (None is returned), so that the
        start that follows decides after it instead of stopping on it."""
        from ffjobs.slurm.jobstate import JobState, poll_jobs

        if pending is None:
            return None
        number, job_id = pending
        status = poll_jobs([job_id])[job_id]
        if status.state is not JobState.CANCELLED:
            return pending
        result = self.backend.ended(number, job_id, status, time.time())
        for entry in self.supervision().add(result):
            record_attempt(self.run, self.run.logger, entry)
            self.run.echo(f"attempt {entry.number}: job {entry.job_id} ended while nobody "
                          f"watched it: {entry.summary}")  # fmt: skip
        return None

    def submit(self, supervision: Supervision, decision: Retry) -> tuple[int, str]:
        """Submit the run's next attempt as ``decision`` says (its exclude list, and its wait as
        a start time: ``sbatch --begin``); (attempt, job id), recorded in ``run.json`` at once."""
        number = len(supervision.records) + 1
        return number, self.backend.submit(number, decision.exclude, decision.delay_s)

    def account(self, supervision: Supervision, result: AttemptResult) -> Decision:
        """Record the attempts ``result`` reports (attempt log, MLflow) with a line each, and
        decide what comes next."""
        lines, decision = supervision.account(result)
        for entry, line in lines:
            record_attempt(self.run, self.run.logger, entry)
            self.run.echo(line)
        return decision

    def outcome(self, supervised: SupervisedOutcome) -> StageOutcome:
        """The train stage's outcome: the newest verified checkpoint and the run's attempts."""
        from ffjobs.train.checkpoint import open_checkpoints

        self.run.logger.log_metrics({"goodput": supervised.goodput}, step=len(self.jobs))
        ref = open_checkpoints(self.run.config, self.job.checkpoint_dir).latest_verified()
        facts = {
            "checkpoint": ref.location if ref else None,
            "checkpoint_dir": self.job.checkpoint_dir,
            "final_step": ref.step if ref else None,
            "attempts": len(attempt_records(self.run)),
            "goodput": supervised.goodput,
            "attempt_log": str(attempts_file(self.run)),
            "excluded": list(supervised.exclude),
            "job_ids": [j["job_id"] for j in self.jobs],
        }
        if supervised.succeeded:
            summary = f"steps -> {facts['final_step']} on SLURM; {supervised.reason}"
            return StageOutcome("train", "passed", 0.0, summary, facts=facts)
        final = supervised.final
        code = failure_exit_code(final.kind.value, final.retryable) if final else ExitCode.FAILED
        if final is not None and final.kind.value in FAILURE_EXIT_CODES:
            facts["failure"] = final.kind.value
        return StageOutcome("train", "failed", 0.0, supervised.reason, code, facts=facts)

    def _recorded_attempt(self, job_id: str) -> int | None:
        return next((j["attempt"] for j in self.jobs if j["job_id"] == job_id), None)

    def _submitted(self, number: int, job_id: str) -> None:
        self.jobs.append({"attempt": number, "job_id": job_id})
        self.run.save()
        self.run.logger.set_tags({"slurm.job_ids": ",".join(j["job_id"] for j in self.jobs)})


def train_on_slurm(config: Config, run: Run, job: TrainJob, *, wait: bool) -> StageOutcome:
    """Submit the run's training to SLURM; with ``wait``, supervise it to its end: retryable
    failures are retried from the newest verified checkpoint with suspect nodes excluded, within
    the run's one attempt budget. Every attempt is recorded in ``<run>/train/attempts.jsonl``
    and in the run's MLflow run."""
    from ffjobs.slurm.jobstate import poll_jobs

    training = SlurmTraining(config, run, job)
    pending = training.unaccounted()
    if not wait:
        if pending is not None and not poll_jobs([pending[1]])[pending[1]].is_terminal:
            live = pending[1]
        else:
            supervision = training.supervision()
            _, live = training.submit(supervision, Retry(supervision.exclude, 0.0))
        summary = (
            f"submitted as SLURM job {live}; follow it with 'ffjobs runs show {run.key}', "
            f"supervise it (retries) with 'ffjobs run --resume {run.key} --stages train'"
        )
        facts = {"job_id": live, "checkpoint_dir": job.checkpoint_dir}
        return StageOutcome("train", "submitted", 0.0, summary, facts=facts)
    training.backend.attach = training.read_cancelled(pending)
    supervision = training.supervision()
    outcome = supervise(
        training.backend,
        supervision.policy,
        nodes_needed=supervision.nodes_needed,
        exclude=supervision.exclude,
        earlier=supervision.records,
        record=lambda entry: record_attempt(run, run.logger, entry),
        echo=run.echo,
    )
    return training.outcome(outcome)
