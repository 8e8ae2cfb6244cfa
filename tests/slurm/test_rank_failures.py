"""Failure reports of a job's ranks, and what squeue tells of a job some nodes have not ended:
the pieces that let the supervisor end a job SLURM cannot end yet (a node whose link is down)."""

from __future__ import annotations

import pytest

from ffjobs.slurm import rank_failures
from ffjobs.slurm.accounting import AccountingError


def scontrol(restarts: int):
    def runner(argv):
        assert argv[:3] == ["scontrol", "show", "job"]
        return f"JobId=41 JobName=k JobState=RUNNING Restarts={restarts} NodeList=node[1-2]\n"

    return runner


def test_a_report_names_the_task_node_and_error_and_counts_only_for_its_run(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    rank_failures.report(tmp_path, "41", 1, "node2", RuntimeError("gloo timeout after 10 s"))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the same job id, requeued by SLURM
    rank_failures.report(tmp_path, "41", 0, "node1", ValueError("boom"))

    (first,) = rank_failures.current_reports(tmp_path, "41", scontrol(restarts=0))
    assert first["task"] == 1 and first["node"] == "node2"
    assert first["error"] == "RuntimeError: gloo timeout after 10 s"
    (second,) = rank_failures.current_reports(tmp_path, "41", scontrol(restarts=1))
    assert second["task"] == 0 and second["error"] == "ValueError: boom"
    assert rank_failures.current_reports(tmp_path, "42", scontrol(restarts=0)) == []
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically


def test_no_report_asks_nothing_of_slurm(tmp_path):
    def runner(argv):
        raise AssertionError(f"ran {argv}")

    assert rank_failures.current_reports(tmp_path, "41", runner) == []


@pytest.mark.parametrize(
    ("squeue", "pending"),
    [
        ("COMPLETING|node2\n", ("node2",)),
        ("COMPLETING|node[2-3]\n", ("node2", "node3")),
        ("RUNNING|node[1-2]\n", ()),  # the cancel has not been taken yet: nothing to conclude
        ("", ()),
    ],
)
def test_nodes_still_completing_are_the_ones_squeue_lists_for_a_completing_job(squeue, pending):
    def runner(argv):
        assert argv == ["squeue", "-h", "-j", "41", "-o", "%T|%N"]
        return squeue

    assert rank_failures.nodes_still_completing("41", runner) == pending


def test_a_job_squeue_no_longer_knows_has_ended_everywhere():
    def runner(argv):
        raise AccountingError("squeue: error: Invalid job id specified")

    assert rank_failures.nodes_still_completing("41", runner) == ()


def test_a_cancelled_job_whose_ranks_both_timed_out_suspects_the_node_that_never_ended_it():
    """A cut link looks the same from both ends; the node that did not confirm the end of the
    cancelled job is the one the controller cannot reach."""
    from ffjobs.slurm.failures import FailureKind, RankLog, classify_failure

    timeout = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 10000ms for recv operation to complete\n"
    )
    ranks = [RankLog(rank=r, node=f"node{r + 1}", text=timeout, exit_code=None) for r in (0, 1)]
    failure = classify_failure("CANCELLED", None, ranks, lost_nodes=("node2",))
    assert failure.kind is FailureKind.COMMUNICATOR and failure.retryable
    assert failure.suspect_nodes == ("node2",)
    assert "suspect node2;" in failure.summary and "none identified" not in failure.summary


def test_a_quiet_job_is_polled_often_while_young_then_every_poll_s():
    watch = rank_failures.EndWatch(started=1000.0)
    first = rank_failures.FIRST_POLL_S
    at = {}
    for watched in (0, 30, 75, 100, 3600):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(rank_failures.time, "monotonic", lambda w=watched: 1000.0 + w)
            at[watched] = watch.interval(10.0, [])
            assert watch.interval(1.0, []) == 1.0  # never longer than asked
            assert watch.interval(10.0, [{"task": 0}]) == 0.5  # a rank reported a failure
    assert at == {0: first, 30: max(first, 3.0), 75: 7.5, 100: 10.0, 3600: 10.0}
