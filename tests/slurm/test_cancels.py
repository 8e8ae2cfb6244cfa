"""Who cancelled a job: ffjobs' own note beside the job's logs, and SLURM accounting's
``CANCELLED by <uid>``."""

from __future__ import annotations

import os
import pwd

from ffjobs.slurm.accounting import AccountingError
from ffjobs.slurm.cancels import (
    CancelNote,
    cancel,
    cancelled_by_user,
    leave_note,
    read_note,
    user_name,
    who_cancelled,
)


def test_a_cancel_leaves_its_note_before_scancel(tmp_path):
    calls = []

    def runner(argv):
        calls.append((list(argv), read_note(tmp_path, "42")))  # the note is there already
        return ""

    cancel("42", tmp_path, "Ctrl-C on ffjobs train --submit --wait", runner=runner)
    assert calls == [(["scancel", "42"], CancelNote("Ctrl-C on ffjobs train --submit --wait"))]
    cancel("43", tmp_path, "ffjobs", "task 1 reported ValueError: x", ours=True, runner=runner)
    assert read_note(tmp_path, "43") == CancelNote("ffjobs", "task 1 reported ValueError: x", True)
    assert not list(tmp_path.glob(".*"))  # written aside, then renamed


def test_no_note_or_an_unusable_one_is_none_and_an_unwritable_folder_still_cancels(tmp_path):
    assert read_note(tmp_path, "42") is None
    (tmp_path / "42_cancelled.json").write_text("not json")
    assert read_note(tmp_path, "42") is None
    calls = []
    cancel("44", tmp_path / "missing", "an Airflow kill of the task", runner=calls.append)
    assert calls == [["scancel", "44"]]
    leave_note(tmp_path / "missing", "44", "nobody")  # no error either


def test_accounting_names_the_user_who_cancelled():
    me = pwd.getpwuid(os.getuid()).pw_name
    answers = {
        "42": f"42|CANCELLED by {os.getuid()}\n",
        "43": "43|COMPLETED\n",
        "44": "44|REQUEUED\n44|CANCELLED by 4294000001\n",  # a requeued job: the last run
        "45": "",
    }

    def runner(argv):
        return answers[argv[argv.index("-j") + 1]]

    assert cancelled_by_user("42", runner) == f"{me} (uid {os.getuid()})"
    assert cancelled_by_user("43", runner) is None
    assert cancelled_by_user("44", runner) == "uid 4294000001"  # no such user here
    assert cancelled_by_user("45", runner) is None

    def down(argv):
        raise AccountingError("sacct failed")

    assert cancelled_by_user("42", down) is None
    assert user_name(0) == "root (uid 0)"


def test_who_cancelled_says_the_person_and_through_what():
    assert who_cancelled(None, "alice (uid 1000)") == "user alice (uid 1000) through scancel"
    note = CancelNote("an Airflow kill of task d.train (run r1)")
    assert who_cancelled(note, "airflow (uid 50000)") == (
        "user airflow (uid 50000) through an Airflow kill of task d.train (run r1)"
    )
    assert who_cancelled(CancelNote("ffjobs (train task)", "watch timed out"), None) == (
        "someone accounting does not name through ffjobs (train task) (watch timed out)"
    )
