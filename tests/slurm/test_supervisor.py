"""The retry supervisor against a fake backend that replays scripted attempt results.

Failures are classified by the real :func:`classify_failure` on the rank logs of
``tests/slurm/data/`` (see ``test_failures.py`` for where they come from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ffjobs.slurm.failures import FailureKind, RankLog, classify_failure
from ffjobs.slurm.jobstate import JobState
from ffjobs.slurm.supervisor import (
    AttemptResult,
    RetryPolicy,
    goodput,
    seconds_lost,
    steps_lost,
    supervise,
)

DATA = Path(__file__).parent / "data"
NODES = ("node1", "node2", "node3", "node4")


def gloo_failure(*, job_id: str = "101", started_at: float = 0.0, **times) -> AttemptResult:
    """Rank 1 on node2 SIGKILLed, rank 0 on node1 saw its gloo connection reset."""
    ranks = [
        RankLog(0, "node1", (DATA / "gloo-read-error-rank0.log").read_text(), 1),
        RankLog(1, "node2", "[fault] rank 1: SIGKILL at step 20\n", -9),
    ]
    values = dict(start_step=0, final_step=80, checkpoint_step=50, checkpoint_at=60.0)
    values |= times
    return AttemptResult(
        job_id=job_id, nodes=("node1", "node2"), state=JobState.FAILED, exit_code=1,
        ranks=ranks, started_at=started_at, ended_at=started_at + 100.0, **values,
    )  # fmt: skip


def user_code_failure() -> AttemptResult:
    ranks = [
        RankLog(0, "node1", (DATA / "value-error-rank0.log").read_text(), 1),
        RankLog(1, "node2", (DATA / "value-error-peer-rank1.log").read_text(), 1),
    ]
    return AttemptResult(
        job_id="201", nodes=("node1", "node2"), state=JobState.FAILED, exit_code=1,
        ranks=ranks, started_at=0.0, ended_at=30.0,
    )  # fmt: skip


def oom_failure(started_at: float = 0.0) -> AttemptResult:
    ranks = [RankLog(1, "node2", (DATA / "cuda-oom-rank1.log").read_text(), 1)]
    return AttemptResult(
        job_id="301", nodes=("node1", "node2"), state=JobState.FAILED, exit_code=1,
        ranks=ranks, started_at=started_at, ended_at=started_at + 40.0,
    )  # fmt: skip


def node_failure(suspect: str, started_at: float = 0.0) -> AttemptResult:
    ranks = [
        RankLog(0, "node1", "", None),
        RankLog(1, suspect, f"srun: error: Node failure on {suspect}\n", None),
    ]
    return AttemptResult(
        job_id="401", nodes=("node1", suspect), state=JobState.NODE_FAILED, exit_code=None,
        ranks=ranks, started_at=started_at, ended_at=started_at + 10.0,
    )  # fmt: skip


def success(*, job_id: str = "102", started_at: float = 110.0, start_step: int = 50):
    return AttemptResult(
        job_id=job_id, nodes=("node1", "node3"), state=JobState.SUCCEEDED, exit_code=0,
        start_step=start_step, final_step=200, checkpoint_step=200, started_at=started_at,
        ended_at=started_at + 90.0, first_step_at=started_at + 15.0,
    )  # fmt: skip


class FakeBackend:
    """Replays ``results`` in order; remembers what each attempt was asked to exclude."""

    def __init__(self, *results: AttemptResult, nodes: tuple[str, ...] | None = None):
        self.results = list(results)
        self.calls: list[tuple[int, tuple[str, ...]]] = []
        self.nodes = nodes

    def run_attempt(self, number: int, exclude: tuple[str, ...]) -> AttemptResult:
        self.calls.append((number, exclude))
        return self.results.pop(0)


class CountingBackend(FakeBackend):
    """Also says how many of ``nodes`` stay usable."""

    def usable_nodes(self, exclude: tuple[str, ...]) -> int | None:
        return len([node for node in NODES if node not in exclude])


def policy(**overrides) -> RetryPolicy:
    values = dict(max_attempts=4, backoff_s=2.0, backoff_max_s=60.0) | overrides
    return RetryPolicy(**values)


def run(backend, retry: RetryPolicy | None = None, **kwargs):
    """supervise() with every side effect captured: (outcome, records, lines, sleeps)."""
    records, lines, sleeps = [], [], []
    outcome = supervise(
        backend, retry or policy(), nodes_needed=kwargs.pop("nodes_needed", 2),
        record=records.append, echo=lines.append, sleep=sleeps.append, **kwargs,
    )  # fmt: skip
    return outcome, records, lines, sleeps


# --- policy -----------------------------------------------------------------------------------


def test_delay_grows_exponentially_and_is_capped():
    retry = RetryPolicy(max_attempts=6, backoff_s=2.0, backoff_factor=3.0, backoff_max_s=50.0)
    assert [retry.delay(n) for n in range(1, 6)] == [2.0, 6.0, 18.0, 50.0, 50.0]


@pytest.mark.parametrize(
    "bad",
    [dict(max_attempts=0), dict(backoff_s=-1.0), dict(backoff_factor=0.5)],
)
def test_policy_rejects_nonsense(bad):
    with pytest.raises(ValueError):
        policy(**bad)


# --- the loop ---------------------------------------------------------------------------------


def test_success_first_time():
    backend = FakeBackend(success(started_at=0.0, start_step=0))
    outcome, records, lines, sleeps = run(backend)
    assert outcome.succeeded and outcome.final is None
    assert outcome.reason == "succeeded after 1 attempt(s)"
    assert backend.calls == [(1, ())] and sleeps == []
    assert len(records) == 1 and records[0].kind is None and records[0].seconds_lost == 0
    assert records[0].first_step_s == 15.0
    assert outcome.goodput == 1.0
    assert lines == ["attempt 1/4: job 102 on node1,node3 succeeded (steps 0 -> 200)"]


def test_communicator_failure_is_retried_without_the_suspect_then_succeeds():
    backend = FakeBackend(gloo_failure(), success(started_at=110.0))
    outcome, records, lines, sleeps = run(backend, exclude=["node9"])
    assert outcome.succeeded and outcome.reason == "succeeded after 2 attempt(s)"
    assert backend.calls == [(1, ("node9",)), (2, ("node9", "node2"))]
    assert outcome.exclude == ("node9", "node2")
    assert sleeps == [2.0]
    assert [r.kind for r in records] == ["communicator", None]
    assert records[0].suspect_nodes == ("node2",) and records[0].excluded == ("node9",)
    assert records[0].wait_before_next_s == 2.0 and records[1].wait_before_next_s == 0.0
    assert records[1].excluded == ("node9", "node2")
    # wall 0..200 s; attempt 1 lost the 40 s after its checkpoint at 60 s
    assert outcome.goodput == pytest.approx((100 - 40 + 90) / 200)
    assert outcome.goodput < 1
    assert lines[0].startswith("attempt 1/4: job 101 on node1,node2 failed: communicator failure")
    assert lines[0].endswith("; retrying in 2 s without node2")


def test_backoff_follows_the_policy_across_attempts():
    failures = [gloo_failure(job_id=str(n), started_at=200.0 * n) for n in range(3)]
    backend = FakeBackend(*failures, success(started_at=700.0))
    outcome, records, _, sleeps = run(backend, policy(backoff_s=5.0, backoff_factor=3.0))
    assert outcome.succeeded
    assert sleeps == [5.0, 15.0, 45.0]
    assert [r.wait_before_next_s for r in records] == [5.0, 15.0, 45.0, 0.0]
    # node2 is suspected every time but excluded once
    assert [exclude for _, exclude in backend.calls] == [(), ("node2",), ("node2",), ("node2",)]


def test_user_code_failure_stops_after_one_attempt():
    backend = FakeBackend(user_code_failure(), success())
    outcome, records, lines, sleeps = run(backend)
    assert not outcome.succeeded and len(backend.calls) == 1 and sleeps == []
    assert outcome.final is not None and outcome.final.kind is FailureKind.USER_CODE
    assert outcome.reason == f"not retryable: {outcome.final.summary}"
    assert "ValueError" in outcome.reason
    assert len(records) == 1 and not records[0].retryable
    assert lines[0].endswith("; stopping")


def test_oom_is_not_retried():
    outcome, records, _, sleeps = run(FakeBackend(oom_failure(), success()))
    assert not outcome.succeeded and len(records) == 1 and sleeps == []
    assert outcome.final is not None and outcome.final.kind is FailureKind.OUT_OF_MEMORY
    assert outcome.reason.startswith("not retryable: out of memory")


def test_budget_spent_lists_every_attempt():
    failures = [gloo_failure(job_id="1"), node_failure("node3", 200.0), gloo_failure(job_id="3")]
    backend = FakeBackend(*failures)
    outcome, records, lines, sleeps = run(backend, policy(max_attempts=3), nodes_needed=1)
    assert not outcome.succeeded and len(backend.calls) == 3 and len(records) == 3
    assert sleeps == [2.0, 4.0]  # no wait after the last attempt
    assert records[-1].wait_before_next_s == 0.0
    assert outcome.reason.startswith("attempt budget of 3 spent: 1: communicator failure")
    assert "; 2: node failure (NODE_FAIL); suspect node3" in outcome.reason
    assert "; 3: communicator failure" in outcome.reason
    assert outcome.final is not None and outcome.final.kind is FailureKind.COMMUNICATOR
    assert lines[-1].startswith("attempt 3/3:") and lines[-1].endswith("; attempt budget spent")


def test_stops_before_submitting_when_suspects_leave_too_few_nodes():
    backend = CountingBackend(node_failure("node3"), gloo_failure(), success())
    outcome, records, lines, sleeps = run(backend, exclude=["node4"], nodes_needed=2)
    # attempt 1 excludes node4 (3 left), attempt 2 node3 too (2 left), node2 leaves only node1
    assert len(backend.calls) == 2 and backend.calls[1] == (2, ("node4", "node3"))
    assert not outcome.succeeded
    assert outcome.reason == "excluding node4,node3,node2 leaves 1 of the 2 nodes the job needs"
    assert sleeps == [2.0] and records[-1].wait_before_next_s == 0.0
    assert lines[-1].endswith(f"; stopping: {outcome.reason}")


def test_initial_exclude_leaving_too_few_nodes_submits_nothing():
    backend = CountingBackend(success())
    outcome, records, lines, _ = run(backend, exclude=["node1", "node2", "node3"], nodes_needed=2)
    assert backend.calls == [] and records == [] and not outcome.succeeded
    assert outcome.reason == "excluding node1,node2,node3 leaves 1 of the 2 nodes the job needs"
    assert outcome.goodput == 0.0 and lines == [f"not submitting: {outcome.reason}"]


def test_classifier_gets_slurm_state_names():
    seen = []

    def classify(state, exit_code, ranks, *, lost_nodes):
        seen.append(state)
        return classify_failure(state, exit_code, ranks)

    timed_out = AttemptResult(
        job_id="7", nodes=("node1",), state=JobState.TIMED_OUT, started_at=0.0, ended_at=5.0
    )
    deadline = AttemptResult(
        job_id="8", nodes=("node1",), state=JobState.TIMED_OUT, slurm_state="DEADLINE",
        started_at=10.0, ended_at=15.0,
    )  # fmt: skip
    backend = FakeBackend(node_failure("node2"), timed_out, deadline)
    outcome, *_ = run(backend, policy(max_attempts=3), classify=classify, nodes_needed=1)
    assert seen == ["NODE_FAIL", "TIMEOUT", "DEADLINE"]
    assert outcome.final is not None and outcome.final.kind is FailureKind.TIMEOUT


def test_a_run_slurm_requeued_itself_is_an_attempt_of_its_own():
    """The node of rank 1 died; SLURM ended that run (NODE_FAIL) and requeued the job under the
    same id on other nodes, where it finished: two attempts, the first naming the dead node."""
    import dataclasses

    died = dataclasses.replace(
        node_failure("node2"), job_id="102", start_step=0, final_step=55, checkpoint_step=50,
        slurm_state="NODE_FAIL", lost_nodes=("node2",),
    )  # fmt: skip
    backend = CountingBackend(dataclasses.replace(success(started_at=10.0), requeued=(died,)))
    outcome, records, lines, _ = run(backend)
    assert outcome.succeeded and len(backend.calls) == 1  # nothing resubmitted
    first, second = records
    assert (first.number, first.job_id, first.kind) == (1, "102", "node_failure")
    assert first.suspect_nodes[0] == "node2" and first.steps_lost == 5
    assert (second.number, second.kind, second.excluded) == (2, None, ("node2",))
    assert "SLURM requeued the job itself" in lines[0]
    assert lines[1].startswith("attempt 2/4: job 102 on node1,node3 succeeded")
    assert outcome.reason == "succeeded after 2 attempt(s)"
    assert 0 < outcome.goodput < 1


def test_requeues_count_against_the_attempt_budget():
    import dataclasses

    died = dataclasses.replace(node_failure("node2"), slurm_state="NODE_FAIL")
    again = dataclasses.replace(node_failure("node3"), slurm_state="NODE_FAIL", requeued=(died,))
    outcome, records, lines, _ = run(CountingBackend(again), policy(max_attempts=2))
    assert not outcome.succeeded and len(records) == 2
    assert "attempt budget spent" in lines[-1]


# --- accounting -------------------------------------------------------------------------------


def test_steps_lost_is_past_the_checkpoint_and_zero_when_unknown_or_succeeded():
    assert steps_lost(gloo_failure(final_step=80, checkpoint_step=50)) == 30
    assert steps_lost(gloo_failure(final_step=80, checkpoint_step=None)) == 0
    assert steps_lost(gloo_failure(final_step=None, checkpoint_step=50)) == 0
    assert steps_lost(success()) == 0


def test_seconds_lost_as_documented():
    # attempt runs 0..100 s
    assert seconds_lost(gloo_failure(checkpoint_at=60.0)) == 40.0
    # a checkpoint older than the attempt saved nothing new: the whole attempt is lost
    assert seconds_lost(gloo_failure(started_at=100.0, checkpoint_at=60.0)) == 100.0
    # nothing checkpointed past where it started: the whole attempt
    no_progress = gloo_failure(start_step=50, checkpoint_step=50, checkpoint_at=None)
    assert seconds_lost(no_progress) == 100.0
    assert seconds_lost(gloo_failure(checkpoint_step=None, checkpoint_at=None)) == 100.0
    # checkpoint time unknown: steps 0..80 between the first step (20 s) and the failure (60 s),
    # checkpoint at step 50 -> 45 s, lost from there to the end at 100 s
    interpolated = gloo_failure(checkpoint_at=None, first_step_at=20.0, failed_at=60.0)
    assert seconds_lost(interpolated) == pytest.approx(55.0)
    assert seconds_lost(success()) == 0.0


def test_goodput_counts_waits_between_attempts_as_lost():
    backend = FakeBackend(gloo_failure(checkpoint_at=100.0), success(started_at=400.0))
    outcome, records, *_ = run(backend)
    assert records[0].seconds_lost == 0.0
    assert outcome.goodput == pytest.approx((100 + 90) / 490)
    assert goodput([]) == 0.0


def test_records_and_outcome_are_json_serialisable():
    outcome, records, *_ = run(FakeBackend(gloo_failure(), success()))
    loaded = json.loads(json.dumps([record.to_dict() for record in records]))
    assert loaded[0]["state"] == "FAILED" and loaded[0]["kind"] == "communicator"
    assert loaded[0]["suspect_nodes"] == ["node2"] and loaded[0]["steps_lost"] == 30
    assert loaded[1]["state"] == "SUCCEEDED" and loaded[1]["excluded"] == ["node2"]
    summary = json.loads(json.dumps(outcome.to_dict()))
    assert summary["succeeded"] and summary["exclude"] == ["node2"]
    assert summary["attempts"] == loaded


# --- the decision -----------------------------------------------------------------------------


def classified(result: AttemptResult, number: int, excluded: tuple[str, ...] = ()):
    """``result`` as the run's attempt record ``number``, classified by the real classifier."""
    from ffjobs.slurm.supervisor import attempt_record

    if result.state is JobState.SUCCEEDED:
        return attempt_record(number, result, None, excluded)
    state = result.slurm_state or {"NODE_FAILED": "NODE_FAIL"}.get(result.state.value, "FAILED")
    failure = classify_failure(state, result.exit_code, result.ranks)
    return attempt_record(number, result, failure, excluded)


@pytest.mark.parametrize(
    ("history", "max_attempts", "expected"),
    [
        ([success()], 4, ("Done", "succeeded after 1 attempt(s)")),
        ([gloo_failure(), success()], 4, ("Done", "succeeded after 2 attempt(s)")),
        ([gloo_failure()], 4, ("Retry", ("node2",), 2.0)),
        ([gloo_failure(), gloo_failure()], 4, ("Retry", ("node2",), 4.0)),
        ([node_failure("node3"), gloo_failure()], 4, ("Retry", ("node3", "node2"), 4.0)),
        ([gloo_failure()], 1, ("Stop", "attempt budget of 1 spent: 1: communicator failure")),
        ([gloo_failure(), gloo_failure()], 2, ("Stop", "attempt budget of 2 spent: 1: ")),
        ([user_code_failure()], 4, ("Stop", "not retryable: ValueError on rank 0")),
        ([oom_failure()], 4, ("Stop", "not retryable: out of memory")),
        ([gloo_failure(), user_code_failure()], 4, ("Stop", "not retryable: ValueError on rank 0")),
    ],
)
def test_decide_over_failure_kinds_and_budgets(history, max_attempts, expected):
    from ffjobs.slurm.supervisor import Done, Retry, Stop, decide

    records = [classified(result, n) for n, result in enumerate(history, start=1)]
    decision = decide(records, policy(max_attempts=max_attempts), nodes_needed=1)
    kind = expected[0]
    assert type(decision) is {"Done": Done, "Retry": Retry, "Stop": Stop}[kind]
    if kind == "Retry":
        assert (decision.exclude, decision.delay_s) == expected[1:]
    else:
        assert decision.reason.startswith(expected[1]), decision.reason


def test_decide_stops_when_the_suspects_leave_too_few_nodes():
    from ffjobs.slurm.supervisor import Stop, decide

    records = [classified(node_failure("node3"), 1)]
    usable = CountingBackend().usable_nodes
    decision = decide(
        records, policy(), nodes_needed=3, exclude=("node4",), usable_nodes=usable
    )  # fmt: skip
    assert decision == Stop("excluding node4,node3 leaves 2 of the 3 nodes the job needs")


def test_the_budget_is_the_runs_and_continues_across_supervisors():
    """A resumed run (or an Airflow retry) that already spent 3 of 4 attempts gets one more,
    numbered 4, without the suspects found before; a run whose budget is spent submits
    nothing."""
    earlier = [classified(gloo_failure(job_id=str(n)), n) for n in (1, 2, 3)]
    backend = FakeBackend(gloo_failure(job_id="4"), success())
    outcome, records, lines, _ = run(backend, earlier=earlier)
    assert backend.calls == [(4, ("node2",))]
    assert [r.number for r in records] == [4] and not outcome.succeeded
    assert outcome.reason.startswith("attempt budget of 4 spent: 1: ")
    assert lines[-1].startswith("attempt 4/4:") and lines[-1].endswith("attempt budget spent")

    spent = [*earlier, records[0]]
    backend = FakeBackend(success())
    outcome, records, lines, _ = run(backend, earlier=spent)
    assert backend.calls == [] and records == [] and not outcome.succeeded
    assert lines == [f"not submitting: {outcome.reason}"]
    assert outcome.final is not None and outcome.final.kind is FailureKind.COMMUNICATOR


def test_a_run_whose_last_attempt_succeeded_is_done_without_submitting():
    earlier = [classified(gloo_failure(), 1), classified(success(), 2, ("node2",))]
    backend = FakeBackend(success())
    outcome, records, _, _ = run(backend, earlier=earlier)
    assert backend.calls == [] and outcome.succeeded
    assert outcome.reason == "succeeded after 2 attempt(s)"


# --- a person's cancel ------------------------------------------------------------------------


def cancelled(*, by: str | None = "user alice (uid 1000) through scancel", ours: bool = False,
              ranks=None, job_id: str = "501") -> AttemptResult:  # fmt: skip
    """A job that ended CANCELLED after its ranks checkpointed step 40 and stopped."""
    stopped = "rank 0: got signal 15; will checkpoint and stop (a cancel: no requeue)\n"
    return AttemptResult(
        job_id=job_id, nodes=("node1", "node2"), state=JobState.CANCELLED,
        slurm_state="CANCELLED", ranks=ranks or [RankLog(0, "node1", stopped, 0)],
        start_step=0, final_step=40, checkpoint_step=40, started_at=0.0, ended_at=50.0,
        cancelled_by=by, cancelled_by_us=ours,
    )  # fmt: skip


def test_a_persons_cancel_is_recorded_as_cancelled_and_never_retried():
    backend = FakeBackend(cancelled(), success())
    outcome, records, lines, sleeps = run(backend)
    assert len(backend.calls) == 1 and sleeps == [] and not outcome.succeeded
    (only,) = records
    assert only.kind == "cancelled" and not only.retryable and only.state is JobState.CANCELLED
    assert only.summary == (
        "cancelled by user alice (uid 1000) through scancel; not retried (an explicit resume "
        "continues from step 40)"
    )
    assert lines == [f"attempt 1/4: job 501 on node1,node2 failed: {only.summary}; stopping"]
    assert outcome.final is not None and outcome.final.kind is FailureKind.CANCELLED


def test_a_cancel_wins_over_what_the_logs_of_its_ranks_say():
    """Ranks SIGKILLed at the end of SLURM's KillWait leave a peer's communicator errors: a
    person's cancel still is one, not a communicator failure to retry."""
    ranks = [RankLog(0, "node1", (DATA / "gloo-read-error-rank0.log").read_text(), 1),
             RankLog(1, "node2", "", -9)]  # fmt: skip
    outcome, records, _, _ = run(FakeBackend(cancelled(ranks=ranks), success()))
    assert [r.kind for r in records] == ["cancelled"] and not outcome.succeeded


def test_a_cancel_ffjobs_made_after_a_rank_failure_is_classified_by_that_failure():
    ranks = [RankLog(0, "node1", (DATA / "gloo-read-error-rank0.log").read_text(), None),
             RankLog(1, "node2", "[fault] rank 1: SIGKILL at step 20\n", -9)]  # fmt: skip
    ours = cancelled(by=None, ours=True, ranks=ranks)
    outcome, records, _, sleeps = run(FakeBackend(ours, success()))
    assert [r.kind for r in records] == ["communicator", None] and outcome.succeeded
    assert records[1].excluded == ("node2",) and sleeps == [2.0]


def test_slurm_ending_a_job_for_a_pre_emption_is_not_a_persons_cancel():
    """``PreemptMode=CANCEL`` records a pre-emption as CANCELLED; slurmstepd's banner says."""
    banner = "slurmstepd: error: *** JOB 501 ON node1 CANCELLED AT 2026-12-01T10:00:00 DUE TO PREEMPTION ***\n"
    outcome, records, _, _ = run(FakeBackend(cancelled(ranks=[RankLog(0, "node1", banner, None)]),
                                             success()))  # fmt: skip
    assert [r.kind for r in records] == ["preemption", None] and outcome.succeeded


def storage_failure() -> AttemptResult:
    """Rank 0's checkpoint folder filled up; rank 1 lost its peer."""
    ranks = [RankLog(0, "node1", (DATA / "storage-enospc-rank0.log").read_text(), 1),
             RankLog(1, "node2", (DATA / "storage-enospc-peer-rank1.log").read_text(), 1)]  # fmt: skip
    return AttemptResult(
        job_id="601", nodes=("node1", "node2"), state=JobState.FAILED, exit_code=1,
        ranks=ranks, started_at=0.0, ended_at=20.0,
    )  # fmt: skip


def test_storage_that_refused_a_checkpoint_is_not_retried():
    outcome, records, _, sleeps = run(FakeBackend(storage_failure(), success()))
    assert [r.kind for r in records] == ["storage"] and sleeps == [] and not outcome.succeeded
    assert outcome.reason.startswith("not retryable: storage error on rank 0 (node1): checkpoint")


@pytest.mark.parametrize(
    ("last", "submits"),
    [(cancelled(), True), (storage_failure(), True), (user_code_failure(), False),
     (oom_failure(), False)],
)  # fmt: skip
def test_an_explicit_start_goes_on_after_a_cancel_but_not_after_a_fatal_failure(last, submits):
    """``ffjobs run --resume`` after a cancelled attempt, or after storage refused a checkpoint
    (once there is room again), submits the next one (its checkpoint is where it resumes);
    after a failure no retry can change, it submits nothing."""
    from ffjobs.slurm.supervisor import Stop, Supervision

    earlier = [classified(gloo_failure(), 1), _classified_cancel(last, 2)]
    backend = FakeBackend(success(job_id="103"))
    outcome, records, lines, _ = run(backend, earlier=earlier)
    assert (backend.calls == [(3, ("node2",))]) is submits, lines
    assert outcome.succeeded is submits
    if not submits:
        assert lines == [f"not submitting: {outcome.reason}"]
    if submits:  # within the run's budget only
        spent = Supervision(policy(max_attempts=2), 2, records=earlier).start()
        assert spent == Stop("attempt budget of 2 spent")


def _classified_cancel(result: AttemptResult, number: int):
    from ffjobs.slurm.failures import cancel_failure
    from ffjobs.slurm.supervisor import attempt_record

    if result.state is JobState.CANCELLED:
        failure = cancel_failure(result.ranks, result.cancelled_by, result.checkpoint_step)
        return attempt_record(number, result, failure)
    return classified(result, number)
