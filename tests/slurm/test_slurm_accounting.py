"""Job state from sacct: parsing, normalisation, polling; fakes stand in for sacct itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ffjobs.slurm.accounting import (
    AccountingError,
    parse_elapsed,
    parse_sacct_line,
    parse_sacct_output,
    run_command,
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


def test_job_cancelled_while_pending_is_settled_without_nodes():
    record = parse_sacct_line("6|CANCELLED by 0|0:0|None assigned|00:00:00|2")
    assert record.nodes == () and record.settled


def test_requeued_job_has_a_line_per_run():
    out = "5|NODE_FAIL|0:0|node1|00:00:10|1\n5|COMPLETED|0:0|node2|00:00:20|1\n"
    assert [r.state for r in parse_sacct_output(out)] == ["NODE_FAIL", "COMPLETED"]


def test_real_subprocess_path_with_fake_sacct(tmp_path, monkeypatch):
    argv_log = fake_sacct(tmp_path, monkeypatch, "echo '8|TIMEOUT|0:0|node[2-3]|00:10:00|2'")
    argv = [
        "sacct",
        "-j",
        "8",
        "-X",
        "-n",
        "-P",
        "-o",
        "JobID,State,ExitCode,NodeList,Elapsed,NNodes",
    ]
    (record,) = parse_sacct_output(run_command(argv))
    assert record.state == "TIMEOUT" and record.nodes == ("node2", "node3")
    assert argv_log.read_text().split() == ["-j", "8", "-X", "-n", "-P", "-o",
                                             "JobID,State,ExitCode,NodeList,Elapsed,NNodes"]  # fmt: skip


def test_failing_sacct_is_one_line_user_error(tmp_path, monkeypatch):
    fake_sacct(tmp_path, monkeypatch,
               "echo 'sacct: error: Problem talking to the database: Connection refused' >&2\n"
               "exit 1")  # fmt: skip
    with pytest.raises(AccountingError) as caught:
        run_command(["sacct", "-j", "8"])
    message = str(caught.value)
    assert "\n" not in message and "Connection refused" in message and "slurmdbd" in message


def test_missing_sacct_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AccountingError, match="'sacct' not found on PATH"):
        run_command(["sacct", "-j", "1"])
