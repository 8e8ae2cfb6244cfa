"""The SLURM job trigger against a scripted hook: one event when the job ends, the early cancel
of a job whose rank reported a failure (none for a watch without the job's folder, the
preflight's), and a cancel on kill only of a job that is still its own.
The hook's real calls (sacct, scancel, squeue through asyncio subprocesses) are tested against
the mini-cluster in tests/integration/test_airflow_slurm.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from ffjobs.airflow.hooks import claim_watch, read_owner, write_owner
from ffjobs.airflow.triggers import SlurmJobTrigger, status_from_payload
from ffjobs.slurm.jobstate import JobState, JobStatus


def status(state: JobState, slurm: str, nodes=("node1", "node2"), exit_code=0) -> JobStatus:
    return JobStatus("42", state, slurm, exit_code, 0, tuple(nodes), "sacct")


class ScriptedHook:
    """Answers each poll with the next of ``statuses`` (the last one repeats)."""

    def __init__(self, *statuses, reports=(), pending=()):
        self.statuses, self.reports, self.pending = list(statuses), list(reports), pending
        self.cancelled: list[str] = []
        self.polls = 0

    async def status(self, job_id):
        self.polls += 1
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    async def cancel(self, job_id):
        self.cancelled.append(job_id)

    async def failure_reports(self, folder, job_id):
        return self.reports

    async def nodes_still_completing(self, job_id):
        return self.pending


def trigger(tmp_path, hook=None, token="1:abc") -> SlurmJobTrigger:
    made = SlurmJobTrigger(
        job_id="42", attempt=2, submitted_at=100.0, folder=str(tmp_path / "jobs"),
        owner_file=str(tmp_path / "slurm-owner.json"), token=token, poll_s=0.01,
    )  # fmt: skip
    if hook is not None:
        made.hook = hook
    return made


def first_event(made: SlurmJobTrigger) -> dict:
    async def run():
        events = [event async for event in made.run()]
        assert len(events) == 1  # one event, then the generator ends
        return events[0].payload

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_serialize_round_trip(tmp_path):
    import importlib

    original = trigger(tmp_path)
    classpath, kwargs = original.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert classpath == "ffjobs.airflow.triggers.SlurmJobTrigger"
    import json

    json.dumps(kwargs)  # stored as plain JSON by the triggerer: nothing else may be in it


def test_one_event_when_the_job_ends(tmp_path):
    write_owner(tmp_path / "slurm-owner.json", {"job_id": "42", "token": "1:abc"})
    hook = ScriptedHook(
        None,  # accounting lags right after sbatch
        status(JobState.PENDING, "PENDING", nodes=()),
        status(JobState.RUNNING, "RUNNING"),
        status(JobState.FAILED, "FAILED", exit_code=1),
    )
    payload = first_event(trigger(tmp_path, hook))
    assert payload["job_id"] == "42" and payload["attempt"] == 2
    assert payload["submitted_at"] == 100.0 and payload["unconfirmed"] == []
    ended = status_from_payload(payload["status"])
    assert ended.state is JobState.FAILED and ended.nodes == ("node1", "node2")
    assert hook.polls == 4 and hook.cancelled == []
    # the run of the trigger claimed the watch: a kill of this run may cancel
    assert read_owner(tmp_path / "slurm-owner.json")["token"] == "1:abc"


def test_a_job_whose_rank_reported_a_failure_is_cancelled_and_ends(tmp_path):
    report = {"time": time.time() - 5, "task": 1, "node": "node2", "restart": 0}
    running = status(JobState.RUNNING, "RUNNING")
    hook = ScriptedHook(running, running, status(JobState.CANCELLED, "CANCELLED"),
                        reports=[report], pending=("node2",))  # fmt: skip
    payload = first_event(trigger(tmp_path, hook))
    assert hook.cancelled == ["42"]
    ended = status_from_payload(payload["status"])
    assert ended.state is JobState.CANCELLED and ended.exit_code is None
    # node1 confirmed the end; node2 never did: it is the lost one
    assert payload["unconfirmed"] == ["node2"]


def test_a_watch_without_the_jobs_folder_never_cancels_early(tmp_path):
    """The preflight's watch: its ranks leave no failure reports, so none are asked for and a
    running job is left to end by itself."""

    class NoReports(ScriptedHook):
        async def failure_reports(self, folder, job_id):
            raise AssertionError("a watch without a folder asked for failure reports")

    report = {"time": time.time() - 5, "task": 1, "node": "node2", "restart": 0}
    running = status(JobState.RUNNING, "RUNNING")
    hook = NoReports(running, running, status(JobState.FAILED, "FAILED", exit_code=1),
                     reports=[report])  # fmt: skip
    made = SlurmJobTrigger(
        job_id="42", attempt=1, submitted_at=100.0, folder=None,
        owner_file=str(tmp_path / "slurm-owner.json"), token="1:abc", poll_s=0.01,
    )  # fmt: skip
    made.hook = hook
    assert made.serialize()[1]["folder"] is None  # what the triggerer rebuilds it from
    payload = first_event(made)
    assert hook.cancelled == []
    assert status_from_payload(payload["status"]).state is JobState.FAILED


@pytest.mark.parametrize(
    ("owner", "cancels"),
    [
        ({"job_id": "42", "token": "1:abc"}, True),  # this try's job, watched by this trigger
        ({"job_id": "42", "token": "2:def"}, False),  # a later try re-attached to it
        ({"job_id": "43", "token": "1:abc"}, False),  # the run watches another job now
    ],
)
def test_on_kill_cancels_only_its_own_job(tmp_path, owner, cancels):
    path = tmp_path / "slurm-owner.json"
    write_owner(path, {"job_id": "42", "token": "1:abc"})
    made = trigger(tmp_path, ScriptedHook(status(JobState.RUNNING, "RUNNING")))
    assert claim_watch(path, "42", "1:abc", made.watcher)
    record = read_owner(path)
    write_owner(path, {**owner, "watcher": record["watcher"]})
    asyncio.run(made.on_kill())
    assert made.hook.cancelled == (["42"] if cancels else [])


def test_on_kill_of_a_trigger_whose_job_another_trigger_now_watches_cancels_nothing(tmp_path):
    """A triggerer whose heartbeat lapsed: its work moved to another triggerer, which claimed
    the job; the old one's kill must not cancel what the new one watches."""
    path = tmp_path / "slurm-owner.json"
    write_owner(path, {"job_id": "42", "token": "1:abc"})
    old, new = (trigger(tmp_path, ScriptedHook(status(JobState.RUNNING, "RUNNING")))
                for _ in range(2))  # fmt: skip
    assert claim_watch(path, "42", "1:abc", old.watcher)
    assert claim_watch(path, "42", "1:abc", new.watcher)
    asyncio.run(old.on_kill())
    assert old.hook.cancelled == []
    asyncio.run(new.on_kill())
    assert new.hook.cancelled == ["42"]


def test_the_cancels_it_makes_leave_a_note_saying_whose(tmp_path):
    """Its own cancel after a rank failure is ffjobs' (classified by the failure); a kill's is
    a person's, through Airflow (recorded as cancelled, never retried)."""
    from ffjobs.slurm.cancels import read_note

    (tmp_path / "jobs").mkdir()
    report = {"time": time.time() - 5, "task": 1, "node": "node2", "restart": 0,
              "error": "ValueError: injected"}  # fmt: skip
    running = status(JobState.RUNNING, "RUNNING")
    hook = ScriptedHook(running, status(JobState.CANCELLED, "CANCELLED"), reports=[report])
    first_event(trigger(tmp_path, hook))
    note = read_note(tmp_path / "jobs", "42")
    assert note is not None and note.ours and note.reason == "task 1 reported ValueError: injected"

    (tmp_path / "jobs" / "42_cancelled.json").unlink()
    path = tmp_path / "slurm-owner.json"
    write_owner(path, {"job_id": "42", "token": "1:abc"})
    made = trigger(tmp_path, ScriptedHook(running))
    assert claim_watch(path, "42", "1:abc", made.watcher)
    asyncio.run(made.on_kill())
    assert made.hook.cancelled == ["42"]
    note = read_note(tmp_path / "jobs", "42")
    assert note is not None and not note.ours and note.by == "an Airflow kill of the task"


def test_the_trigger_module_imports_no_heavy_library():
    """The triggerer loads the trigger: no torch, numpy, MLflow or submitit in it."""
    import subprocess
    import sys

    probe = (
        "import sys, ffjobs.airflow.triggers\n"
        "heavy = [m for m in ('torch', 'numpy', 'mlflow', 'submitit', 'boto3') "
        "if m in sys.modules]\n"
        "print(heavy); sys.exit(1 if heavy else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
