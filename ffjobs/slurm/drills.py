"""Faults injected from outside a running SLURM training job, for the drills of the test suite
and ``ffjobs bench recovery``: wait until the run's first job reaches a step, find its nodes,
and cut or throttle a node's link on the local mini-cluster: the script the local stack's
environment names in ``FFJOBS_LINK_SCRIPT`` (``infra/local/up.sh`` writes it).

A drill's run keeps everything under one work folder: ``runs/`` (``runs_dir``) and ``jobs/``
(``slurm.folder``), as both callers set them. The link changes always come undone::

    job_id = wait_for_step(work, 3)
    with cut_link(job_nodes(job_id)[1]):
        ...  # that node unreachable from the host and the other nodes
    with throttled_link("node3", "8mbit"):
        ...  # node3's traffic, both ways, limited to 8 Mbit/s
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ffjobs.slurm.progress import read_starts

LINK_SCRIPT_VAR = "FFJOBS_LINK_SCRIPT"
DEFAULT_RATE = "8mbit"


def wait_for_step(work: Path, step: int, timeout_s: float = 300) -> str:
    """Block until rank 0 of the run's first job (``work/runs``, ``work/jobs``) has reported
    ``step`` in its progress record; return that job's id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in (work / "runs").glob("*/run.json"):
            jobs = json.loads(record.read_text()).get("slurm_jobs") or []
            progress = list((work / "jobs").glob("*/attempt-1/*/*_progress.jsonl"))
            reached = (
                [s for start in read_starts(progress[0]) for s in start.steps] if progress else []
            )
            if jobs and reached and max(reached) >= step:
                return jobs[0]["job_id"]
        time.sleep(0.1)
    raise TimeoutError(f"training under {work} never reached step {step} in {timeout_s:.0f} s")


def job_nodes(job_id: str, timeout_s: float = 60) -> list[str]:
    """The nodes of a running job, in SLURM's order (the node of rank 1 is the second); asked
    again until SLURM says the job runs (the ranks can be training before it does)."""
    from ffjobs.slurm.jobstate import JobState, poll_jobs

    deadline = time.monotonic() + timeout_s
    while True:
        status = poll_jobs([job_id])[job_id]
        if status.state is JobState.RUNNING and status.nodes:
            return list(status.nodes)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"SLURM job {job_id} not running on known nodes after {timeout_s:.0f} s "
                f"(state {status.slurm_state}, nodes {list(status.nodes)}, from {status.source})"
            )
        time.sleep(0.5)


def _link(*args: str, timeout_s: float = 30) -> None:
    script = os.environ.get(LINK_SCRIPT_VAR)
    if not script or not Path(script).is_file():
        raise FileNotFoundError(
            f"{LINK_SCRIPT_VAR}={script or ''}: link drills run on the local mini-cluster; "
            "source the environment infra/local/up.sh writes (.state/local-stack/env.sh)"
        )
    result = subprocess.run(
        ["bash", script, *args], capture_output=True, text=True, timeout=timeout_s
    )
    if result.returncode != 0:
        raise RuntimeError(f"link.sh {' '.join(args)} failed: {result.stderr.strip()}")


def cut(node: str) -> None:
    """Take ``node``'s link down: nothing reaches it or leaves it until :func:`restore`."""
    _link("cut", node)


def restore(node: str) -> None:
    """Bring ``node``'s link back; returns once SLURM has heard from the node again (link.sh
    has its slurmd register at once and waits up to 30 s for SLURM to take it in)."""
    _link("restore", node, timeout_s=90)


def throttle(node: str, rate: str = DEFAULT_RATE) -> None:
    """Limit ``node``'s traffic in both directions to ``rate`` (tc syntax: ``8mbit``)."""
    _link("throttle", rate, node)


def unthrottle(node: str) -> None:
    _link("unthrottle", node)


@contextmanager
def cut_link(node: str) -> Iterator[None]:
    try:  # restore and unthrottle are idempotent: safe even if the change itself half failed
        cut(node)
        yield
    finally:
        restore(node)


@contextmanager
def throttled_link(node: str, rate: str = DEFAULT_RATE) -> Iterator[None]:
    try:
        throttle(node, rate)
        yield
    finally:
        unthrottle(node)
