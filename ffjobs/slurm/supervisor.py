"""Retry a training job until it succeeds, fails for good, or spends its attempt budget.

A small loop with every side effect injected, so a SLURM backend, a local backend, the CLI and an
Airflow operator can all drive it: the backend runs one attempt to its end and reports an
:class:`AttemptResult`; the supervisor classifies a failure (:func:`classify_failure`), records
it, and either stops with a one-line reason or waits and runs the next attempt with the suspect
nodes excluded. Resuming from the newest verified checkpoint is the job's own business (the
trainer always resumes). A requeue that submitit did on USR2 (checkpoint, requeue, go on) is
part of one attempt; a run that SLURM ended on a node failure and requeued itself under the same
job id is an attempt of its own, which the backend reports in ``AttemptResult.requeued``.

A person's cancel (``scancel``, an Airflow kill, Ctrl-C on ``ffjobs train --submit --wait``) ends
the attempt as CANCELLED and is never retried; a job ffjobs cancelled itself because a rank
reported a failure (``AttemptResult.cancelled_by_us``) is classified by that failure. A
cancelled attempt, and a storage failure (a full or refused checkpoint store), stop the
supervisor, but a later explicit start (``ffjobs run --resume``) goes on after them
(:meth:`Supervision.start`), from the newest verified checkpoint.
Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from ffjobs.slurm.failures import Failure, FailureKind, RankLog, cancel_failure, classify_failure
from ffjobs.slurm.jobstate import JobState

# The classifier speaks SLURM's state names; these JobStates are spelled differently there.
_CLASSIFIER_STATE = {
    JobState.SUCCEEDED: "COMPLETED",
    JobState.TIMED_OUT: "TIMEOUT",
    JobState.NODE_FAILED: "NODE_FAIL",
}


@dataclass(kw_only=True)
class RetryPolicy:
    """How many attempts a job gets and how long to wait between them."""

    max_attempts: int
    """The attempt budget, first attempt included (>= 1)."""
    backoff_s: float
    """Wait after the first failed attempt."""
    backoff_factor: float = 2.0
    backoff_max_s: float

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("backoff_s and backoff_max_s must be >= 0")
        if self.backoff_factor < 1:
            raise ValueError(f"backoff_factor must be >= 1, got {self.backoff_factor}")

    def delay(self, attempt_number: int) -> float:
        """Seconds to wait after attempt ``attempt_number`` (1-based) failed:
        ``backoff_s * backoff_factor ** (attempt_number - 1)``, capped at ``backoff_max_s``."""
        if attempt_number < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt_number}")
        return min(self.backoff_s * self.backoff_factor ** (attempt_number - 1), self.backoff_max_s)


@dataclass(kw_only=True)
class AttemptResult:
    """What a backend reports once one attempt has ended. Times are wall-clock epoch seconds."""

    job_id: str | None
    """SLURM job id; None for a local launch."""
    nodes: tuple[str, ...]
    state: JobState
    """Final state of the attempt (after any requeue SLURM or submitit did on its own)."""
    exit_code: int | None = None
    ranks: Sequence[RankLog] = ()
    """What each rank printed, for the failure classification."""
    start_step: int | None = None
    """Step the attempt resumed from (0 for a fresh run)."""
    final_step: int | None = None
    """Last step the job reached, per its logs or result."""
    checkpoint_step: int | None = None
    """Newest verified checkpoint when the attempt ended."""
    checkpoint_at: float | None = None
    """When that checkpoint was written, if the backend knows."""
    started_at: float
    ended_at: float
    first_step_at: float | None = None
    """Time of the first training step after the start: start-up and recovery cost."""
    failed_at: float | None = None
    """When the failure happened, if known (a hung collective ends long after it)."""
    slurm_state: str | None = None
    """SLURM's own state name (``NODE_FAIL``, ``DEADLINE``, ...) when there is one; it is finer
    than ``state`` and is what the classifier is given."""
    lost_nodes: tuple[str, ...] = ()
    """Nodes of the attempt the controller stopped reaching (down, not responding)."""
    requeued: tuple[AttemptResult, ...] = ()
    """Earlier runs of the same job that SLURM ended and requeued itself (a node failure):
    each is an attempt of its own, recorded before this one."""
    cancelled_by: str | None = None
    """A CANCELLED attempt: who and through what, as far as SLURM accounting and ffjobs' own
    note say (e.g. ``user alice (uid 1000) through scancel``)."""
    cancelled_by_us: bool = False
    """ffjobs cancelled the job itself because a rank reported a failure: the attempt is
    classified by that failure, not as a cancel."""


class AttemptBackend(Protocol):
    """Runs attempts of one training job.

    A backend may also define ``usable_nodes(exclude: tuple[str, ...]) -> int | None``: how many
    nodes stay eligible for the job with ``exclude`` left out (None if unknown). Without it the
    supervisor cannot tell that excluding suspects leaves too few nodes, and submits anyway.
    A submission that fails (sbatch rejects the job) is best reported as a FAILED result with
    sbatch's message in ``ranks``: then it is classified (CONFIG) instead of raised.
    """

    def run_attempt(self, number: int, exclude: tuple[str, ...]) -> AttemptResult:
        """Submit attempt ``number`` (1-based) without the ``exclude`` nodes; wait for its end."""
        ...


@dataclass
class AttemptRecord:
    """One attempt, as the run's attempt log and its MLflow run keep it."""

    number: int
    job_id: str | None
    nodes: tuple[str, ...]
    excluded: tuple[str, ...]
    """The exclude list this attempt ran with."""
    state: JobState
    exit_code: int | None
    kind: str | None
    """The :class:`FailureKind` value; None for a success."""
    retryable: bool
    summary: str
    evidence: tuple[str, ...]
    suspect_nodes: tuple[str, ...]
    start_step: int | None
    final_step: int | None
    checkpoint_step: int | None
    steps_lost: int
    """Steps trained past the newest verified checkpoint, to be redone (see :func:`steps_lost`)."""
    seconds_lost: float
    """Wall seconds of work to be redone (see :func:`seconds_lost`)."""
    started_at: float
    ended_at: float
    first_step_s: float | None
    """Seconds from the start to the first training step: what starting (or recovering) cost."""
    wait_before_next_s: float = 0.0
    """Backoff before the next attempt; 0 when there is none."""

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended_at - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (state as its value, tuples as lists)."""
        out = asdict(self)
        out["state"] = self.state.value
        for name in ("nodes", "excluded", "evidence", "suspect_nodes"):
            out[name] = list(out[name])
        return out


@dataclass
class SupervisedOutcome:
    """How supervising a job ended."""

    succeeded: bool
    attempts: list[AttemptRecord]
    final: Failure | None
    """The last attempt's failure; None on success or when nothing was submitted."""
    reason: str
    """One line: why the supervisor stopped."""
    goodput: float
    """Productive share of the wall time, see :func:`goodput`."""
    exclude: tuple[str, ...] = ()
    """The exclude list at the end: the initial one plus every suspect."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "succeeded": self.succeeded,
            "attempts": [record.to_dict() for record in self.attempts],
            "final": self.final.to_dict() if self.final else None,
            "reason": self.reason,
            "goodput": self.goodput,
            "exclude": list(self.exclude),
        }


def steps_lost(result: AttemptResult) -> int:
    """Steps to redo after ``result``: ``final_step - checkpoint_step`` for a failed attempt when
    both are known (never negative), else 0; 0 for a success."""
    if result.state is JobState.SUCCEEDED:
        return 0
    if result.final_step is None or result.checkpoint_step is None:
        return 0
    return max(0, result.final_step - result.checkpoint_step)


def seconds_lost(result: AttemptResult) -> float:
    """Wall seconds of ``result`` whose work must be redone: ``ended_at`` minus the time of the
    newest checkpoint, counted from no earlier than the attempt's start.

    - success: 0;
    - ``checkpoint_at`` given: ``ended_at - max(checkpoint_at, started_at)`` (a checkpoint older
      than the attempt means it saved nothing new: the whole attempt is lost);
    - no checkpoint newer than ``start_step`` (or the steps are unknown): the whole duration;
    - a newer checkpoint at an unknown time: its time is interpolated linearly over the steps
      from the first step (``first_step_at``, else ``started_at``) to the last one (``failed_at``,
      else ``ended_at``).
    """
    if result.state is JobState.SUCCEEDED:
        return 0.0
    duration = max(0.0, result.ended_at - result.started_at)
    if result.checkpoint_at is not None:
        return min(duration, max(0.0, result.ended_at - result.checkpoint_at))
    start, saved, final = result.start_step, result.checkpoint_step, result.final_step
    if start is None or saved is None or final is None or saved <= start or final <= start:
        return duration
    first = result.first_step_at if result.first_step_at is not None else result.started_at
    last = result.failed_at if result.failed_at is not None else result.ended_at
    saved_at = first + (last - first) * min(1.0, (saved - start) / (final - start))
    return min(duration, max(0.0, result.ended_at - saved_at))


def goodput(attempts: Sequence[AttemptRecord]) -> float:
    """Productive seconds over wall seconds across ``attempts``, between 0 and 1.

    Productive: each attempt's duration minus its ``seconds_lost`` (start-up counts as
    productive). Wall: from the first attempt's start to the last one's end, so backoff waits and
    queueing between attempts count against it. 0 without attempts or wall time.
    """
    if not attempts:
        return 0.0
    wall = max(r.ended_at for r in attempts) - min(r.started_at for r in attempts)
    if wall <= 0:
        return 0.0
    productive = sum(max(0.0, r.duration_s - r.seconds_lost) for r in attempts)
    return min(1.0, productive / wall)


@dataclass(frozen=True)
class Retry:
    """Run the next attempt without ``exclude``, after ``delay_s`` seconds."""

    exclude: tuple[str, ...]
    delay_s: float
    new_suspects: tuple[str, ...] = ()
    """Nodes the newest attempt added to ``exclude``."""


@dataclass(frozen=True)
class Stop:
    """No further attempt: ``reason`` says why in one line."""

    reason: str


@dataclass(frozen=True)
class Done:
    """The newest attempt succeeded."""

    reason: str


Decision = Retry | Stop | Done


def excluded_after(
    records: Sequence[AttemptRecord], exclude: Sequence[str] = ()
) -> tuple[str, ...]:
    """``exclude`` plus every suspect of the retryable failures in ``records``, in order, once."""
    nodes = [*exclude]
    for entry in records:
        if entry.kind is not None and entry.retryable:
            nodes += entry.suspect_nodes
    return tuple(dict.fromkeys(nodes))


RESUMABLE_KINDS = frozenset({FailureKind.CANCELLED.value, FailureKind.STORAGE.value})
"""Failures never retried, after which an explicit start may go on (:meth:`Supervision.start`):
a person's cancel, and storage that was full or refused (once it is fixed)."""


def decide(
    records: Sequence[AttemptRecord],
    policy: RetryPolicy,
    *,
    nodes_needed: int,
    exclude: Sequence[str] = (),
    usable_nodes: Callable[[tuple[str, ...]], int | None] | None = None,
) -> Decision:
    """What to do after the newest of a run's attempt ``records`` (oldest first; all of the
    run's attempts, whoever supervised them, so the budget is the run's and never starts again).

    ``exclude``: the nodes left out from the first attempt on. ``usable_nodes(exclude)`` says
    how many nodes stay eligible without ``exclude`` (None: unknown), so a retry that could not
    get enough nodes stops instead of queueing for ever.
    """
    if not records:
        raise ValueError("decide needs at least one attempt record")
    latest = records[-1]
    if latest.kind is None:
        return Done(f"succeeded after {len(records)} attempt(s)")
    if not latest.retryable:
        return Stop(f"not retryable: {latest.summary}")
    if len(records) >= policy.max_attempts:
        spent = "; ".join(f"{r.number}: {r.summary}" for r in records)
        return Stop(f"attempt budget of {policy.max_attempts} spent: {spent}")
    before = excluded_after(records[:-1], exclude)
    after = excluded_after(records, exclude)
    new = after[len(before) :]
    if new:
        shortage = _node_shortage(usable_nodes, after, nodes_needed)
        if shortage:
            return Stop(shortage)
    return Retry(after, policy.delay(len(records)), new)


@dataclass
class Supervision:
    """A run's attempts and what to do next: what both drivers of the retry keep, the blocking
    one of the CLI (:func:`supervise`) and the deferring Airflow operator, which rebuilds it from
    the run's attempt records whenever it resumes."""

    policy: RetryPolicy
    nodes_needed: int
    exclude: tuple[str, ...] = ()
    """Nodes left out from the first attempt on."""
    records: list[AttemptRecord] = field(default_factory=list)
    """The run's attempts so far, oldest first (earlier supervisors' included)."""
    usable_nodes: Callable[[tuple[str, ...]], int | None] | None = None
    classify: Callable[..., Failure] = classify_failure
    """Called like :func:`classify_failure`."""
    failures: dict[int, Failure] = field(default_factory=dict)
    """This process's classifications by attempt number (with what records do not keep)."""
    earlier: int = field(init=False, default=0)
    """How many of :attr:`records` were there before this supervision began."""

    def __post_init__(self) -> None:
        if self.nodes_needed < 1:
            raise ValueError(f"nodes_needed must be >= 1, got {self.nodes_needed}")
        self.exclude = tuple(dict.fromkeys(self.exclude))
        self.earlier = len(self.records)

    def decide(self) -> Decision:
        return decide(
            self.records, self.policy, nodes_needed=self.nodes_needed, exclude=self.exclude,
            usable_nodes=self.usable_nodes,
        )  # fmt: skip

    def start(self) -> Decision:
        """Before submitting anything: ``Retry`` (at once) with the nodes to leave out, or why
        not (the run's last attempt succeeded or cannot be retried, its budget is spent, or too
        few nodes are left).

        Starting is a person's explicit act (a resume, a cleared Airflow task; an Airflow
        retry never follows these stops): after a cancelled attempt or a storage failure
        (:data:`RESUMABLE_KINDS`) it goes on, within the budget."""
        if self.records and self.records[-1].kind in RESUMABLE_KINDS:
            if len(self.records) >= self.policy.max_attempts:
                return Stop(f"attempt budget of {self.policy.max_attempts} spent")
            after = excluded_after(self.records, self.exclude)
            shortage = _node_shortage(self.usable_nodes, after, self.nodes_needed)
            return Stop(shortage) if shortage else Retry(after, 0.0)
        if self.records:
            decision = self.decide()
            return replace(decision, delay_s=0.0) if isinstance(decision, Retry) else decision
        shortage = _node_shortage(self.usable_nodes, self.exclude, self.nodes_needed)
        return Stop(shortage) if shortage else Retry(self.exclude, 0.0)

    def account(self, result: AttemptResult) -> tuple[list[tuple[AttemptRecord, str]], Decision]:
        """Add the attempts ``result`` reports (each run SLURM ended and requeued itself, then
        its own) to :attr:`records`; return each with its one line for a person, and the
        decision after them (a retry's wait already in the last record)."""
        lines = []
        for requeued in result.requeued:  # SLURM requeued the job itself: attempts of their own
            entry = self._add(requeued)
            lines.append((entry, f"{self._head(entry)} failed: {entry.summary}; "
                                 "SLURM requeued the job itself"))  # fmt: skip
        entry = self._add(result)
        decision = self.decide()
        head = self._head(entry)
        if isinstance(decision, Retry):
            entry.wait_before_next_s = decision.delay_s
            without = f" without {','.join(decision.new_suspects)}" if decision.new_suspects else ""
            line = f"{head} failed: {entry.summary}; retrying in {decision.delay_s:g} s{without}"
        elif isinstance(decision, Done):
            line = f"{head} succeeded{_steps(result)}"
        elif not entry.retryable:
            line = f"{head} failed: {entry.summary}; stopping"
        elif len(self.records) >= self.policy.max_attempts:
            line = f"{head} failed: {entry.summary}; attempt budget spent"
        else:
            line = f"{head} failed: {entry.summary}; stopping: {decision.reason}"
        lines.append((entry, line))
        return lines, decision

    def add(self, result: AttemptResult) -> list[AttemptRecord]:
        """Add the attempts ``result`` reports to :attr:`records` without deciding what comes
        next: a job read before a start (:meth:`start` decides after it)."""
        return [self._add(run) for run in (*result.requeued, result)]

    def outcome(self, decision: Decision) -> SupervisedOutcome:
        """How supervising ended: this process's attempts, the run's goodput and exclude list."""
        last = self.records[-1] if self.records else None
        failure = None
        if last is not None and last.kind is not None:
            failure = self.failures.get(last.number) or _failure_of(last)
        return SupervisedOutcome(
            isinstance(decision, Done), self.records[self.earlier :], failure, decision.reason,
            goodput(self.records), excluded_after(self.records, self.exclude),
        )  # fmt: skip

    def _add(self, result: AttemptResult) -> AttemptRecord:
        failure = None
        if result.state is JobState.CANCELLED and not result.cancelled_by_us:
            failure = cancel_failure(result.ranks, result.cancelled_by, result.checkpoint_step)
        if failure is None and result.state is not JobState.SUCCEEDED:
            state = result.slurm_state or _CLASSIFIER_STATE.get(result.state, result.state.value)
            failure = self.classify(
                state, result.exit_code, result.ranks,
                lost_nodes=result.lost_nodes,
            )  # fmt: skip
        excluded = excluded_after(self.records, self.exclude)
        entry = attempt_record(len(self.records) + 1, result, failure, excluded)
        self.records.append(entry)
        if failure is not None:
            self.failures[entry.number] = failure
        return entry

    def _head(self, entry: AttemptRecord) -> str:
        job = f"job {entry.job_id}" if entry.job_id else "local job"
        where = f"{job} on {','.join(entry.nodes)}" if entry.nodes else job
        return f"attempt {entry.number}/{self.policy.max_attempts}: {where}"


def _ignore(_record: AttemptRecord) -> None:
    pass


def supervise(
    backend: AttemptBackend,
    policy: RetryPolicy,
    *,
    nodes_needed: int,
    exclude: Sequence[str] = (),
    earlier: Sequence[AttemptRecord] = (),
    record: Callable[[AttemptRecord], None] = _ignore,
    echo: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    classify: Callable[..., Failure] = classify_failure,
) -> SupervisedOutcome:
    """Run attempts of a job through ``backend`` until :func:`decide` says stop or done: the
    blocking driver of a :class:`Supervision`, for the CLI.

    ``earlier``: the run's attempts before this call (a resumed run, an Airflow retry): numbers
    and the budget continue after them, and a last one that needs no retry ends the call at
    once. Each attempt ends in one :class:`AttemptRecord` passed to ``record`` and one line to
    ``echo``; between attempts the supervisor waits ``policy.delay(n)`` through ``sleep``.
    """
    supervision = Supervision(
        policy, nodes_needed, tuple(exclude), list(earlier),
        getattr(backend, "usable_nodes", None), classify,
    )  # fmt: skip
    decision = supervision.start()
    if not isinstance(decision, Retry):
        echo(f"not submitting: {decision.reason}")
        return supervision.outcome(decision)
    while True:
        result = backend.run_attempt(len(supervision.records) + 1, decision.exclude)
        lines, decision = supervision.account(result)
        for entry, line in lines:
            record(entry)
            echo(line)
        if not isinstance(decision, Retry):
            return supervision.outcome(decision)
        sleep(decision.delay_s)


def _failure_of(entry: AttemptRecord) -> Failure:
    """The classification an attempt record keeps, as a :class:`Failure` again."""
    return Failure(
        kind=FailureKind(entry.kind), retryable=entry.retryable, summary=entry.summary,
        evidence=entry.evidence, suspect_nodes=entry.suspect_nodes,
    )  # fmt: skip


def attempt_record(
    number: int, result: AttemptResult, failure: Failure | None, excluded: tuple[str, ...] = ()
) -> AttemptRecord:
    """The record of attempt ``number``: what ``result`` reports, and why it failed."""
    first_step_s = (
        result.first_step_at - result.started_at if result.first_step_at is not None else None
    )
    return AttemptRecord(
        number=number,
        job_id=result.job_id,
        nodes=tuple(result.nodes),
        excluded=excluded,
        state=result.state,
        exit_code=result.exit_code,
        kind=failure.kind.value if failure else None,
        retryable=failure.retryable if failure else False,
        summary=failure.summary if failure else f"succeeded{_steps(result)}",
        evidence=failure.evidence if failure else (),
        suspect_nodes=failure.suspect_nodes if failure else (),
        start_step=result.start_step,
        final_step=result.final_step,
        checkpoint_step=result.checkpoint_step,
        steps_lost=steps_lost(result),
        seconds_lost=seconds_lost(result),
        started_at=result.started_at,
        ended_at=result.ended_at,
        first_step_s=first_step_s,
    )


def _node_shortage(
    usable_nodes: Callable[[tuple[str, ...]], int | None] | None,
    exclude: tuple[str, ...],
    nodes_needed: int,
) -> str | None:
    """Why the job cannot run without ``exclude``, or None if it can (or nobody knows)."""
    if not exclude or usable_nodes is None:
        return None
    usable = usable_nodes(exclude)
    if usable is None or usable >= nodes_needed:
        return None
    return (
        f"excluding {','.join(exclude)} leaves {usable} of the {nodes_needed} nodes the job needs"
    )


def _steps(result: AttemptResult) -> str:
    if result.start_step is None or result.final_step is None:
        return ""
    return f" (steps {result.start_step} -> {result.final_step})"
