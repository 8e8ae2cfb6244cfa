"""Job state from sacct: parsing, normalisation, polling; fakes stand in for sacct itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ffjobs.slurm.accounting import (
    AccountingError,
    parse_elapsed,
    parse_sacct_line,
    read_job_accounting,
    run_command,
    wait_for_final_state,
)


def fake_sacct(tmp_path: Path, monkeypatch, script: str) -> Path:
    """Put an executable ``sacct`` shell script first on PATH; it logs its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    sacct = bin_dir / "sacct"
    sacct.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/argv.log"\n{script}\n')
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "argv.log"


def test_cancelled_by_uid_is_normalised_and_fields_parsed():
    record = parse_sacct_line("41|CANCELLED by 0|0:15|node[1-2]|00:01:05|2")
    assert record.state == "CANCELLED" and record.raw_state == "CANCELLED by 0"
    assert (record.exit_code, record.signal) == (0, 15)
    assert record.nodes == ("node1", "node2")
    assert record.elapsed_s == 65 and record.finished


def test_running_is_not_finished_and_truncated_state_is_cleaned():
    record = parse_sacct_line("7|RUNNING+|0:0|node3|00:00:09|1")
    assert record.state == "RUNNING" and not record.finished


def test_pending_job_has_no_nodes_and_lists_expand():
    assert parse_sacct_line("9|PENDING|0:0|None assigned|00:00:00|2").nodes == ()
    assert parse_sacct_line("9|RUNNING|0:0|gpu[08-09],c1|00:00:01|3").nodes == (
        "gpu08", "gpu09", "c1")  # fmt: skip


def test_malformed_node_list_is_an_accounting_error():
    with pytest.raises(AccountingError, match=r"node\[1-2"):
        parse_sacct_line("9|RUNNING|0:0|node[1-2|00:00:01|2")


@pytest.mark.parametrize(
    ("text", "seconds"), [("00:00:09", 9), ("12:34", 754), ("1-02:03:04", 93784), ("01:02.500", 62)]
)
def test_parse_elapsed(text, seconds):
    assert parse_elapsed(text) == seconds


def test_malformed_line_names_the_expected_fields():
    with pytest.raises(AccountingError, match="JobID,State,ExitCode,NodeList,Elapsed,NNodes"):
        parse_sacct_line("41|COMPLETED")


def test_read_job_accounting_asks_for_the_allocation_only():
    calls = []

    def runner(argv):
        calls.append(list(argv))
        return "12|FAILED|1:0|node2|00:00:03|1\n"

    record = read_job_accounting(12, runner)
    assert calls == [["sacct", "-j", "12", "-X", "-n", "-P", "-o",
                      "JobID,State,ExitCode,NodeList,Elapsed,NNodes"]]  # fmt: skip
    assert record.state == "FAILED" and record.exit_code == 1 and record.nodes == ("node2",)


def test_unknown_job_has_no_record():
    assert read_job_accounting(99, lambda argv: "") is None


def test_requeued_job_reports_its_latest_run():
    out = "5|NODE_FAIL|0:0|node1|00:00:10|1\n5|COMPLETED|0:0|node2|00:00:20|1\n"
    assert read_job_accounting(5, lambda argv: out).state == "COMPLETED"


def test_wait_polls_until_terminal(monkeypatch):
    answers = iter(["", "3|PENDING|0:0|None assigned|00:00:00|1", "3|RUNNING|0:0|node1|00:00:01|1",
                    "3|COMPLETED|0:0|node1|00:00:02|1"])  # fmt: skip
    record = wait_for_final_state(3, timeout_s=10, poll_s=0, runner=lambda argv: next(answers))
    assert record.state == "COMPLETED"


def test_wait_skips_a_record_whose_node_list_is_still_partial():
    # Seen on Slurm 22.05: a 2-node job first appears as COMPLETED on node1 alone.
    answers = iter(["4|COMPLETED|0:0|node1|00:00:01|2", "4|COMPLETED|0:0|node[1-2]|00:00:01|2"])
    record = wait_for_final_state(4, timeout_s=10, poll_s=0, runner=lambda argv: next(answers))
    assert record.nodes == ("node1", "node2")


def test_job_cancelled_while_pending_is_settled_without_nodes():
    record = parse_sacct_line("6|CANCELLED by 0|0:0|None assigned|00:00:00|2")
    assert record.nodes == () and record.settled


def test_wait_times_out_with_the_last_state():
    with pytest.raises(TimeoutError, match=r"job 3 not finished.*RUNNING"):
        wait_for_final_state(3, timeout_s=0.05, poll_s=0.01,
                             runner=lambda argv: "3|RUNNING|0:0|node1|00:00:01|1")  # fmt: skip


def test_real_subprocess_path_with_fake_sacct(tmp_path, monkeypatch):
    argv_log = fake_sacct(tmp_path, monkeypatch, "echo '8|TIMEOUT|0:0|node[2-3]|00:10:00|2'")
    record = read_job_accounting("8")
    assert record.state == "TIMEOUT" and record.nodes == ("node2", "node3")
    assert argv_log.read_text().split() == ["-j", "8", "-X", "-n", "-P", "-o",
                                             "JobID,State,ExitCode,NodeList,Elapsed,NNodes"]  # fmt: skip


def test_failing_sacct_is_one_line_user_error(tmp_path, monkeypatch):
    fake_sacct(tmp_path, monkeypatch,
               "echo 'sacct: error: Problem talking to the database: Connection refused' >&2\n"
               "exit 1")  # fmt: skip
    with pytest.raises(AccountingError) as caught:
        read_job_accounting("8")
    message = str(caught.value)
    assert "\n" not in message and "Connection refused" in message and "slurmdbd" in message


def test_missing_sacct_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AccountingError, match="'sacct' not found on PATH"):
        run_command(["sacct", "-j", "1"])
