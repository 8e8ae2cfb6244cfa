"""The drills' view of a running job; a fake stands in for the SLURM queries."""

from __future__ import annotations

import pytest

from ffjobs.slurm import drills, jobstate
from ffjobs.slurm.jobstate import JobState, JobStatus


def status(state: str, nodes: tuple[str, ...]) -> JobStatus:
    return JobStatus("7", JobState[state], state, None, None, nodes, "sacct")


def test_job_nodes_waits_until_slurm_says_the_job_runs(monkeypatch):
    answers = [
        status("PENDING", ()),
        status("PENDING", ("node1",)),
        status("RUNNING", ("node1", "node2")),
    ]
    monkeypatch.setattr(jobstate, "poll_jobs", lambda ids: {"7": answers.pop(0)})
    monkeypatch.setattr(drills.time, "sleep", lambda s: None)
    assert drills.job_nodes("7") == ["node1", "node2"]
    assert answers == []


def test_job_nodes_names_the_job_and_its_state_when_the_nodes_never_come(monkeypatch):
    monkeypatch.setattr(jobstate, "poll_jobs", lambda ids: {"7": status("PENDING", ())})
    monkeypatch.setattr(drills.time, "sleep", lambda s: None)
    with pytest.raises(
        TimeoutError, match=r"job 7 not running on known nodes .*PENDING, nodes \[\], from sacct"
    ):
        drills.job_nodes("7", timeout_s=0)


def test_a_link_drill_outside_the_local_stack_says_what_to_source(monkeypatch):
    monkeypatch.delenv(drills.LINK_SCRIPT_VAR, raising=False)
    with (
        pytest.raises(
            FileNotFoundError, match=r"FFJOBS_LINK_SCRIPT=: link drills run on the local"
        ),
        drills.cut_link("node2"),
    ):
        pass
