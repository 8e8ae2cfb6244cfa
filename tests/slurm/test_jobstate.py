"""Job states across sacct, squeue and scontrol; fakes stand in for the SLURM commands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ffjobs.slurm.accounting import TERMINAL_STATES, AccountingError
from ffjobs.slurm.jobstate import (
    SLURM_TO_JOB_STATE,
    JobState,
    job_state,
    parse_scontrol_line,
    poll_jobs,
)

SACCT_ARGV_HEAD = ["sacct", "-X", "-n", "-P", "-j"]
SACCT_FIELDS_ARGV = ["-o", "JobID,State,ExitCode,NodeList,Elapsed,NNodes"]
INVALID_ID = AccountingError(
    "'squeue ...' failed (exit 1): slurm_load_jobs error: Invalid job id specified"
)


class FakeSlurm:
    """Answers ``sacct``, ``squeue`` and ``scontrol`` per argv and records every call.

    An answer is stdout text or an exception to raise, as ``run_command`` raises on a non-zero
    exit. ``scontrol`` answers per job id; an id it was not given is an invalid job id.
    """

    def __init__(self, sacct="", squeue="", scontrol=None):
        self.answers = {"sacct": sacct, "squeue": squeue}
        self.scontrol = scontrol or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] == "scontrol":
            answer = self.scontrol.get(argv[-1], INVALID_ID)
        else:
            answer = self.answers[argv[0]]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def commands(self) -> list[str]:
        return [argv[0] for argv in self.calls]


def scontrol_line(job_id, state, exit_code="0:0", nodes="node1", extra=""):
    """One ``scontrol show job -o`` line, with the fields around the ones read."""
    return (
        f"JobId={job_id} JobName=wrap UserId=root(0) GroupId=root(0) Priority=4294901757 "
        f"Account=(null) JobState={state} Reason=None Dependency=(null) Requeue=1 Restarts=0 "
        f"ExitCode={exit_code} RunTime=00:00:01 TimeLimit=00:02:00 {extra}Partition=debug "
        f"NodeList={nodes} NumNodes=1 TRES=cpu=1,mem=512M,node=1 Command=/tmp/my job.sh "
        "WorkDir=/tmp\n"
    )


SLURM_STATES = [
    ("PENDING", JobState.PENDING, False),
    ("CONFIGURING", JobState.PENDING, False),
    ("RESV_DEL_HOLD", JobState.PENDING, False),
    ("RUNNING", JobState.RUNNING, False),
    ("RESIZING", JobState.RUNNING, False),
    ("SIGNALING", JobState.RUNNING, False),
    ("COMPLETING", JobState.COMPLETING, False),
    ("STAGE_OUT", JobState.COMPLETING, False),
    ("COMPLETED", JobState.SUCCEEDED, True),
    ("FAILED", JobState.FAILED, True),
    ("SPECIAL_EXIT", JobState.FAILED, True),
    ("CANCELLED", JobState.CANCELLED, True),
    ("REVOKED", JobState.CANCELLED, True),
    ("TIMEOUT", JobState.TIMED_OUT, True),
    ("DEADLINE", JobState.TIMED_OUT, True),
    ("PREEMPTED", JobState.PREEMPTED, True),
    ("NODE_FAIL", JobState.NODE_FAILED, True),
    ("BOOT_FAIL", JobState.NODE_FAILED, True),
    ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY, True),
    ("REQUEUED", JobState.REQUEUED, False),
    ("REQUEUE_FED", JobState.REQUEUED, False),
    ("REQUEUE_HOLD", JobState.REQUEUED, False),
    ("SUSPENDED", JobState.SUSPENDED, False),
    ("STOPPED", JobState.SUSPENDED, False),
]


@pytest.mark.parametrize(("slurm", "expected", "terminal"), SLURM_STATES)
def test_every_slurm_state_maps_as_documented(slurm, expected, terminal):
    assert job_state(slurm) is expected
    assert job_state(slurm).is_terminal is terminal


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("CANCELLED by 123", JobState.CANCELLED),
        ("RUNNING+", JobState.RUNNING),
        ("completed", JobState.SUCCEEDED),
        ("LAUNCH_FAILED", JobState.UNKNOWN),
        ("", JobState.UNKNOWN),
    ],
)
def test_raw_states_are_normalised_and_strangers_are_unknown(raw, expected):
    assert job_state(raw) is expected
    assert not JobState.UNKNOWN.is_terminal


def test_the_table_covers_exactly_the_listed_states_and_agrees_with_accounting():
    assert set(SLURM_TO_JOB_STATE) == {slurm for slurm, _, _ in SLURM_STATES}
    assert all(job_state(state).is_terminal for state in TERMINAL_STATES)


def test_three_jobs_cost_one_sacct_call():
    slurm = FakeSlurm(sacct="1|COMPLETED|0:0|node1|00:00:05|1\n"
                            "2|FAILED|3:0|node[2-3]|00:00:02|2\n"
                            "3|CANCELLED by 0|0:15|node3|00:00:09|1\n")  # fmt: skip
    statuses = poll_jobs([1, "2", 3], runner=slurm)
    assert slurm.calls == [[*SACCT_ARGV_HEAD, "1,2,3", *SACCT_FIELDS_ARGV]]
    assert list(statuses) == ["1", "2", "3"]
    assert [s.state for s in statuses.values()] == [
        JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]  # fmt: skip
    failed, cancelled = statuses["2"], statuses["3"]
    assert (failed.exit_code, failed.signal, failed.nodes) == (3, 0, ("node2", "node3"))
    assert (cancelled.slurm_state, cancelled.signal, cancelled.source) == ("CANCELLED", 15, "sacct")


def test_ids_missing_from_sacct_go_to_one_squeue_call_then_scontrol():
    slurm = FakeSlurm(
        sacct="1|RUNNING|0:0|node1|00:00:05|1\n",
        squeue="2|PENDING|\n",
        scontrol={"3": scontrol_line(3, "RUNNING", nodes="node[2-3]")},
    )
    statuses = poll_jobs(["1", "2", "3"], runner=slurm)
    assert slurm.commands() == ["sacct", "squeue", "scontrol"]
    assert slurm.calls[1] == ["squeue", "-h", "-j", "2,3", "-o", "%i|%T|%N"]
    assert slurm.calls[2] == ["scontrol", "show", "job", "-o", "3"]
    assert [statuses[i].source for i in "123"] == ["sacct", "squeue", "scontrol"]
    assert statuses["2"].state is JobState.PENDING and statuses["2"].nodes == ()
    assert statuses["2"].exit_code is None  # squeue does not say
    assert statuses["3"].state is JobState.RUNNING and statuses["3"].nodes == ("node2", "node3")


def test_a_job_accounting_still_calls_pending_is_asked_of_the_controller():
    """What sacct printed on the mini-cluster for 4 s after the controller started a 2-node job:
    PENDING, the first node alone, no node count."""
    slurm = FakeSlurm(sacct="4|PENDING|0:0|node1|00:00:00|0\n", squeue="4|RUNNING|node[1-2]\n")
    status = poll_jobs(["4"], runner=slurm)["4"]
    assert slurm.commands() == ["sacct", "squeue"]
    assert (status.state, status.nodes, status.source) == (
        JobState.RUNNING, ("node1", "node2"), "squeue")  # fmt: skip


def test_a_pending_job_the_controller_does_not_know_keeps_accountings_word():
    slurm = FakeSlurm(sacct="4|PENDING|0:0|None assigned|00:00:00|1\n", squeue=INVALID_ID)
    status = poll_jobs(["4"], runner=slurm)["4"]
    assert (status.state, status.source) == (JobState.PENDING, "sacct")


@pytest.mark.parametrize("squeue", [INVALID_ID, AccountingError("'squeue' not found on PATH")])
def test_a_failing_squeue_falls_through_to_scontrol_per_id(squeue):
    slurm = FakeSlurm(
        squeue=squeue,
        scontrol={"5": scontrol_line(5, "PENDING", nodes="(null)"),
                  "6": scontrol_line(6, "FAILED", exit_code="3:0")},
    )  # fmt: skip
    statuses = poll_jobs(["5", "6"], runner=slurm)
    assert slurm.commands() == ["sacct", "squeue", "scontrol", "scontrol"]
    assert statuses["5"].state is JobState.PENDING and statuses["5"].nodes == ()
    assert (statuses["6"].state, statuses["6"].exit_code) == (JobState.FAILED, 3)
    assert statuses["6"].source == "scontrol"


def test_an_id_nothing_knows_is_unknown_with_the_reason():
    statuses = poll_jobs(["77"], runner=FakeSlurm(squeue=INVALID_ID))
    status = statuses["77"]
    assert status.state is JobState.UNKNOWN and status.source == "none"
    assert not status.is_terminal
    assert "sacct: no record" in status.reason
    assert "squeue:" in status.reason and "scontrol:" in status.reason
    assert "Invalid job id specified" in status.reason and "\n" not in status.reason


def test_sacct_down_falls_back_to_the_queue():
    down = AccountingError("'sacct ...' failed (exit 1): Connection refused; is slurmdbd up")
    slurm = FakeSlurm(sacct=down, squeue="8|RUNNING|node[1-2]\n")
    status = poll_jobs(["8"], runner=slurm)["8"]
    assert (status.state, status.source, status.nodes) == (
        JobState.RUNNING, "squeue", ("node1", "node2"))  # fmt: skip


def test_a_finished_job_seen_only_by_squeue_gets_its_exit_code_from_scontrol():
    slurm = FakeSlurm(squeue="9|FAILED|node1\n",
                      scontrol={"9": scontrol_line(9, "FAILED", exit_code="3:0")})  # fmt: skip
    status = poll_jobs(["9"], runner=slurm)["9"]
    assert slurm.commands() == ["sacct", "squeue", "scontrol"]
    assert (status.state, status.exit_code, status.source) == (JobState.FAILED, 3, "scontrol")


def test_squeue_answer_stands_when_scontrol_has_forgotten_the_job():
    status = poll_jobs(["9"], runner=FakeSlurm(squeue="9|COMPLETED|node1\n"))["9"]
    assert (status.state, status.source, status.exit_code) == (JobState.SUCCEEDED, "squeue", None)


def test_array_tasks_and_het_components_parse_and_steps_are_ignored():
    slurm = FakeSlurm(sacct="123_4|TIMEOUT|0:0|node1|00:10:00|1\n"
                            "200+0|COMPLETED|0:0|node1|00:00:05|1\n"
                            "200+1|NODE_FAIL|0:0|node2|00:00:05|1\n"
                            "7.batch|FAILED|1:0|node3|00:00:01|1\n"
                            "7|COMPLETED|0:0|node3|00:00:01|1\n")  # fmt: skip
    statuses = poll_jobs(["123_4", "200", "200+0", "7"], runner=slurm)
    assert slurm.commands() == ["sacct"]
    assert statuses["123_4"].state is JobState.TIMED_OUT
    # The het job as a whole: its first component that did not succeed.
    assert statuses["200"].state is JobState.NODE_FAILED and statuses["200"].job_id == "200"
    assert statuses["200+0"].state is JobState.SUCCEEDED
    assert statuses["7"].state is JobState.SUCCEEDED


def test_an_array_with_a_task_still_running_is_not_finished():
    slurm = FakeSlurm(sacct="50_0|FAILED|1:0|node1|00:00:01|1\n"
                            "50_1|RUNNING|0:0|node2|00:00:05|1\n"
                            "50_[2-9]|PENDING|0:0|None assigned|00:00:00|1\n")  # fmt: skip
    status = poll_jobs(["50"], runner=slurm)["50"]
    assert status.state is JobState.RUNNING and not status.is_terminal


def test_a_requeued_job_reports_its_latest_run():
    slurm = FakeSlurm(
        sacct="5|NODE_FAIL|0:0|node1|00:00:10|1\n5|PENDING|0:0|None assigned|0:00|1\n"
    )
    assert poll_jobs(["5"], runner=slurm)["5"].state is JobState.PENDING


def test_every_run_of_a_requeued_job_in_order():
    from datetime import datetime

    from ffjobs.slurm.jobstate import JobRun, job_runs

    slurm = FakeSlurm(
        sacct="5|NODE_FAIL|node[1-2]|2026-12-01T11:28:29|2026-12-01T11:29:15\n"
        "5|RUNNING|node[1,3]|2026-12-01T11:31:20|Unknown\n"
        "5.batch|COMPLETED|node1|2026-12-01T11:28:29|2026-12-01T11:29:15\n"
    )
    first, second = job_runs("5", runner=slurm)
    at = datetime.fromisoformat  # sacct prints local time, as fromisoformat reads it
    assert first == JobRun("NODE_FAIL", ("node1", "node2"), at("2026-12-01T11:28:29").timestamp(),
                           at("2026-12-01T11:29:15").timestamp())  # fmt: skip
    assert second.nodes == ("node1", "node3") and second.ended_at is None
    assert job_runs("6", runner=FakeSlurm(sacct="")) == []


def test_scontrol_finds_array_tasks_and_het_components_by_shown_and_raw_id():
    array_task = scontrol_line(124, "OUT_OF_MEMORY", "0:9", extra="ArrayJobId=123 ArrayTaskId=4 ")
    component = scontrol_line(301, "RUNNING", extra="HetJobId=300 HetJobOffset=1 ")
    slurm = FakeSlurm(squeue=INVALID_ID,
                      scontrol={"123_4": array_task, "124": array_task, "300+1": component})  # fmt: skip
    statuses = poll_jobs(["123_4", "124", "300+1"], runner=slurm)
    assert statuses["123_4"].state is JobState.OUT_OF_MEMORY and statuses["123_4"].signal == 9
    assert statuses["124"].state is JobState.OUT_OF_MEMORY and statuses["124"].source == "scontrol"
    assert statuses["300+1"].state is JobState.RUNNING


def test_scontrol_line_keeps_values_with_spaces_and_equals_signs():
    fields = parse_scontrol_line(scontrol_line(41, "CANCELLED", "0:15"))
    assert fields["Command"] == "/tmp/my job.sh" and fields["TRES"] == "cpu=1,mem=512M,node=1"
    assert (fields["JobState"], fields["ExitCode"]) == ("CANCELLED", "0:15")


def test_a_malformed_id_is_unknown_and_does_not_spoil_the_batch():
    slurm = FakeSlurm(sacct="1|COMPLETED|0:0|node1|00:00:05|1\n")
    statuses = poll_jobs(["1", "1; rm -rf", "1"], runner=slurm)
    assert slurm.calls == [[*SACCT_ARGV_HEAD, "1", *SACCT_FIELDS_ARGV]]
    assert statuses["1"].state is JobState.SUCCEEDED
    assert statuses["1; rm -rf"].state is JobState.UNKNOWN
    assert statuses["1; rm -rf"].reason == "not a SLURM job id"


def test_no_ids_ask_nothing():
    slurm = FakeSlurm()
    assert poll_jobs([], runner=slurm) == {} and slurm.calls == []


def test_real_subprocess_path_with_fake_commands(tmp_path, monkeypatch):
    """The default runner turns squeue's non-zero exit into a miss, not a crash."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "sacct": "exit 0",
        "squeue": "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
        "scontrol": f"echo '{scontrol_line(12, 'FAILED', '3:0').strip()}'",
    }
    for name, body in scripts.items():
        path: Path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/argv.log"\n{body}\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    status = poll_jobs(["12"])["12"]
    assert (status.state, status.exit_code, status.source) == (JobState.FAILED, 3, "scontrol")
    logged = [line.split()[0] for line in (tmp_path / "argv.log").read_text().splitlines()]
    assert logged == ["sacct", "squeue", "scontrol"]
