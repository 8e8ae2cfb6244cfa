"""What only the controller knows: a node it lost during the job is the suspect even when every
rank's log only blames its peer (a cut link looks the same from both ends)."""

from __future__ import annotations

from pathlib import Path

from ffjobs.slurm.failures import FailureKind, RankLog, classify_failure
from ffjobs.train.slurm_job import unresponsive_nodes

DATA = Path(__file__).parents[1] / "slurm" / "data"  # the SLURM logs the slurm tests read too


def both_time_out() -> list[RankLog]:
    text = (DATA / "gloo-recv-timeout-rank0.log").read_text()
    return [RankLog(0, "node1", text, 1), RankLog(1, "node2", text, 1)]


def test_a_node_that_stopped_responding_is_the_suspect():
    failure = classify_failure("FAILED", 1, both_time_out(), lost_nodes=("node2",))
    assert failure.kind is FailureKind.COMMUNICATOR and failure.retryable
    assert failure.suspect_nodes[0] == "node2"
    assert failure.evidence[0] == "slurmctld: node2 stopped responding during the job"


def test_without_lost_nodes_the_logs_decide_alone():
    plain = classify_failure("FAILED", 1, both_time_out())
    assert not any(e.startswith("slurmctld:") for e in plain.evidence)


def test_a_fatal_failure_stays_fatal_whatever_the_nodes_did():
    bug = [RankLog(0, "node1", (DATA / "value-error-rank0.log").read_text(), 1)]
    failure = classify_failure("FAILED", 1, bug, lost_nodes=("node2",))
    assert failure.kind is FailureKind.USER_CODE and failure.suspect_nodes == ()


def test_unresponsive_nodes_reads_sinfo_states(tmp_path, monkeypatch):
    sinfo = tmp_path / "sinfo"
    sinfo.write_text("#!/bin/sh\nprintf 'node1|idle\\nnode2|idle*\\nnode3|down*\\n'\n")
    sinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    assert unresponsive_nodes(["node1", "node2", "node3"]) == ("node2", "node3")
    assert unresponsive_nodes([]) == ()
