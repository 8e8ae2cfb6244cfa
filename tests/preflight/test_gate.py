"""A preflight FAIL that blames nodes the training job can do without excludes them instead of
stopping the run; a FAIL that is not about one node, or too few nodes left, still stops it."""

from __future__ import annotations

from ffjobs.config import load_config
from ffjobs.preflight.stage import gated_nodes

PARTITION = ["node1", "node2", "node3"]


def report(*findings: tuple[str, str | None], suspects=("node3",), check="slow-link") -> dict:
    rows = [{"level": level, "check": check, "message": "x", "node": n} for level, n in findings]
    return {"verdict": "FAIL", "suspect_nodes": list(suspects), "findings": rows}


def cluster(*overrides: str):
    return load_config("minicluster", list(overrides))  # 2-node jobs on a 3-node partition


def test_a_slow_node_is_excluded_when_the_rest_still_hold_the_job():
    failed = report(("FAIL", "node3"), ("WARN", None))
    assert gated_nodes(cluster(), failed, usable=PARTITION) == ["node3"]


def test_too_few_nodes_left_stops_the_run():
    assert gated_nodes(cluster("slurm.nodes=3"), report(("FAIL", "node3")), usable=PARTITION) == []
    excluded = cluster("slurm.exclude=[node1]")
    assert gated_nodes(excluded, report(("FAIL", "node3")), usable=PARTITION) == []


def test_a_failure_of_the_whole_fabric_is_not_a_node_to_exclude():
    everywhere = report(("FAIL", "node3"), ("FAIL", None))  # e.g. a bad NCCL setting
    assert gated_nodes(cluster(), everywhere, usable=PARTITION) == []
    assert gated_nodes(cluster(), report(("FAIL", None), suspects=()), usable=PARTITION) == []


def test_a_slow_job_explained_by_a_slow_node_excludes_that_node():
    """One throttled link drags the whole ring below the profile's bandwidth minimum."""
    failed = report(("FAIL", "node3"))
    failed["findings"].append({"level": "FAIL", "check": "bandwidth", "message": "x", "node": None})
    assert gated_nodes(cluster(), failed, usable=PARTITION) == ["node3"]
    # without a slow node or link to explain it, a slow fabric stops the run
    version = report(("FAIL", "node3"), check="versions")
    version["findings"].append(
        {"level": "FAIL", "check": "bandwidth", "message": "x", "node": None}
    )
    assert gated_nodes(cluster(), version, usable=PARTITION) == []


def test_local_runs_have_no_nodes_to_exclude():
    local = cluster("slurm.executor=local", "slurm.nodes=1")
    assert gated_nodes(local, report(("FAIL", "node3")), usable=PARTITION) == []
