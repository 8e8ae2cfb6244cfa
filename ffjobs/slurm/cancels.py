"""Who or what cancelled a run's SLURM job, and whether ffjobs did it itself.

SLURM accounting records a cancel as ``CANCELLED by <uid>``: the person, by user name here.
What they cancelled it through only ffjobs knows, so every cancel ffjobs makes leaves a note
beside the job's logs first (:func:`cancel`): an Airflow kill (the trigger's ``on_kill``), Ctrl-C
on ``ffjobs train --submit --wait``, a watch that ended without an answer, or the supervisor's
own cancel of a job whose rank reported a failure (``ours``: that attempt is classified by the
failure, never as a cancel). A job cancelled without a note was cancelled with ``scancel`` (or
anything else that talks to SLURM) by the person accounting names.

A pre-emption or a time limit is not a cancel: SLURM records it as ``PREEMPTED`` or
``TIMEOUT`` (or, with ``PreemptMode=CANCEL``, as ``CANCELLED`` with slurmstepd's ``DUE TO
PREEMPTION`` line in the logs, which the classifier reads), and it signals USR2 ahead of it.

Standard library only: the Airflow triggerer loads it.
"""

from __future__ import annotations

import json
import pwd
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ffjobs.slurm.accounting import AccountingError, Runner, run_command

_BY_UID = re.compile(r"^CANCELLED\s+by\s+(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class CancelNote:
    """What ffjobs wrote before it cancelled a job."""

    by: str
    """What cancelled it, e.g. ``an Airflow kill of task train``."""
    reason: str = ""
    ours: bool = False
    """ffjobs cancelled the job because a rank reported a failure: classify by that failure."""


def note_path(folder: str | Path, job_id: str) -> Path:
    """Where the note of ``job_id`` goes: its submitit folder, beside its logs."""
    return Path(folder) / f"{job_id}_cancelled.json"


def leave_note(
    folder: str | Path, job_id: str, by: str, reason: str = "", *, ours: bool = False
) -> None:
    """Record (atomically) why ffjobs is about to cancel ``job_id``. Best effort: a folder that
    cannot be written to must not stop the cancel."""
    path = note_path(folder, job_id)
    record = {"by": by, "reason": reason, "ours": ours, "time": time.time()}
    partial = path.with_name(f".{path.name}.tmp")
    try:
        partial.write_text(json.dumps(record))
        partial.replace(path)
    except OSError:
        pass


def read_note(folder: str | Path, job_id: str) -> CancelNote | None:
    """The note ffjobs left before cancelling ``job_id``; None if it left none."""
    try:
        record = json.loads(note_path(folder, job_id).read_text())
        return CancelNote(
            str(record["by"]), str(record.get("reason", "")), record.get("ours") is True
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cancel(
    job_id: str,
    folder: str | Path | None,
    by: str,
    reason: str = "",
    *,
    ours: bool = False,
    runner: Runner = run_command,
) -> None:
    """``scancel`` ``job_id``, noting first (in ``folder``, when there is one) who asked and why."""
    if folder is not None:
        leave_note(folder, job_id, by, reason, ours=ours)
    runner(["scancel", job_id])


def user_name(uid: int) -> str:
    """``alice (uid 1000)``; ``uid 1000`` for a uid this machine does not know."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def cancelled_by_user(job_id: str, runner: Runner = run_command) -> str | None:
    """The user accounting says cancelled ``job_id`` (``CANCELLED by <uid>``); None when it
    does not say (not cancelled, or accounting cannot be asked)."""
    argv = ["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobID,State"]
    try:
        text = runner(argv)
    except AccountingError:
        return None
    found = None
    for line in text.splitlines():  # a requeued job has a line per run: the last is the latest
        job, _, state = line.strip().partition("|")
        match = _BY_UID.match(state.strip())
        if job == str(job_id):
            found = user_name(int(match.group(1))) if match else None
    return found


def who_cancelled(note: CancelNote | None, user: str | None) -> str:
    """One phrase: the person and what they cancelled the job through, as far as known."""
    person = f"user {user}" if user else "someone accounting does not name"
    through = note.by if note is not None else "scancel"
    reason = f" ({note.reason})" if note is not None and note.reason else ""
    return f"{person} through {through}{reason}"
