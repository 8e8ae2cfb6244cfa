"""Where several SLURM jobs stand, in ffjobs' own states: what a retry supervisor polls.

``poll_jobs`` asks ``sacct`` once for the whole batch. Accounting lags right after submission,
after a job's start and while slurmdbd is slow (or down), so the ids it does not know or still
calls pending go to one ``squeue`` call, and those still unanswered to ``scontrol show job`` one
by one; an id no source knows is ``UNKNOWN`` with the reason. A terminal state from ``squeue``
has no exit code, so such an id is asked of ``scontrol`` too (``squeue``'s answer stands if
``scontrol`` has none).

Every SLURM job state (``squeue(1)``/``sacct(1)`` JOB STATE CODES, Slurm 22.05 to 24.x) maps to
one ``JobState``; ``CANCELLED by 123`` and ``RUNNING+`` are normalised first, anything else is
``UNKNOWN``:

=============== ============= ======== ===================================================
SLURM state     JobState      terminal why
=============== ============= ======== ===================================================
PENDING         PENDING       no       waiting for resources
CONFIGURING     PENDING       no       allocated, nodes still booting: the script has not started
RESV_DEL_HOLD   PENDING       no       held since its reservation was deleted; it never ran
RUNNING         RUNNING       no
RESIZING        RUNNING       no       still running, about to change size
SIGNALING       RUNNING       no       being signalled, allocation kept; the next poll says more
COMPLETING      COMPLETING    no       processes still ending on some nodes; exit code not final
STAGE_OUT       COMPLETING    no       script ended, burst buffer still staging files out
COMPLETED       SUCCEEDED     yes      every process exited 0
FAILED          FAILED        yes      non-zero exit or another failure of the job itself
SPECIAL_EXIT    FAILED        yes      the site's epilog held it for its exit value; it runs
                                       again only if someone releases it (scancel it first)
CANCELLED       CANCELLED     yes      a user or admin cancelled it: not ours to retry
REVOKED         CANCELLED     yes      federation: a sibling cluster runs it, nothing runs here
TIMEOUT         TIMED_OUT     yes      hit its time limit
DEADLINE        TIMED_OUT     yes      hit its ``--deadline``: ran out of time, too
PREEMPTED       PREEMPTED     yes      killed for a higher-priority job (requeue mode shows
                                       REQUEUED instead)
NODE_FAIL       NODE_FAILED   yes      an allocated node failed: retry without it
BOOT_FAIL       NODE_FAILED   yes      launch failed, typically a node that would not boot
OUT_OF_MEMORY   OUT_OF_MEMORY yes      the kernel OOM-killed a process
REQUEUED        REQUEUED      no       SLURM runs it again under the same id: do not resubmit
REQUEUE_FED     REQUEUED      no       requeued by the federation, same reasoning
REQUEUE_HOLD    REQUEUED      no       requeued and held; SLURM still owns it, do not resubmit
SUSPENDED       SUSPENDED     no       stopped, cores released to other jobs; may resume
STOPPED         SUSPENDED     no       SIGSTOPped, cores kept; may resume
(anything else) UNKNOWN       no       a state this table does not know: decide on a timeout
=============== ============= ======== ===================================================

Array tasks (``123_4``) and heterogeneous job components (``123+0``) are ids of their own; an id
that only matches components (``123`` of an array) takes the state of the first unfinished one,
else of the first that did not succeed, else of the first. Job steps (``123.batch``) never show:
``sacct -X`` lists allocations only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from ffjobs.slurm.accounting import (
    SACCT_FIELDS,
    AccountingError,
    Runner,
    allocated_nodes,
    normalise_state,
    parse_sacct_output,
    run_command,
)
from ffjobs.slurm.nodes import NodeListError

SQUEUE_FORMAT = "%i|%T|%N"
# Digits, then an array task (_4, _[1-3]) or het component (+0); anything else would make sacct
# reject the whole batch.
JOB_ID_PATTERN = re.compile(r"\d+(?:_\d+|_\[[\d,%-]+\]|\+\d+)?")


def submission_order(job_id: str) -> int:
    """SLURM hands out job ids in submission order: ``123`` of ``123_4`` or ``123+0``."""
    return int(job_id.split("_")[0].split("+")[0])


class JobState(StrEnum):
    """ffjobs' own job states, coarser than SLURM's (see the module docstring's table)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAILED = "NODE_FAILED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    SUSPENDED = "SUSPENDED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        """The job will not run again under this id; its outcome is final."""
        return self in _TERMINAL


_TERMINAL = frozenset({
    JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT,
    JobState.PREEMPTED, JobState.NODE_FAILED, JobState.OUT_OF_MEMORY,
})  # fmt: skip

SLURM_TO_JOB_STATE: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "COMPLETING": JobState.COMPLETING,
    "STAGE_OUT": JobState.COMPLETING,
    "COMPLETED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMED_OUT,
    "DEADLINE": JobState.TIMED_OUT,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAILED,
    "BOOT_FAIL": JobState.NODE_FAILED,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "REQUEUED": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "REQUEUE_HOLD": JobState.REQUEUED,
    "SUSPENDED": JobState.SUSPENDED,
    "STOPPED": JobState.SUSPENDED,
}
"""Every SLURM job state name, normalised, to its ffjobs state."""


def job_state(slurm_state: str) -> JobState:
    """The ffjobs state of a SLURM state as any client prints it (``CANCELLED by 0`` included)."""
    return SLURM_TO_JOB_STATE.get(normalise_state(slurm_state).upper(), JobState.UNKNOWN)


@dataclass(frozen=True)
class JobStatus:
    """One job's state as the first source that knew it reported it."""

    job_id: str
    state: JobState
    slurm_state: str
    """Normalised SLURM state, e.g. ``CANCELLED``; ``UNKNOWN`` when no source knew the job."""
    exit_code: int | None
    """Exit code of the batch script; ``None`` when the source does not say (``squeue``)."""
    signal: int | None
    """Signal that ended the batch script (0 if none); ``None`` when the source does not say."""
    nodes: tuple[str, ...]
    source: str
    """``sacct``, ``squeue``, ``scontrol``, or ``none`` when no source knew the job."""
    reason: str = ""
    """Why no source knew the job; empty when one did (an unmapped SLURM state is ``UNKNOWN``
    with ``slurm_state`` saying which)."""

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal


def poll_jobs(job_ids: Iterable[str | int], runner: Runner = run_command) -> dict[str, JobStatus]:
    """Each job's status, keyed by id in the order given: one ``sacct`` call for the batch, then
    ``squeue`` (one call) and ``scontrol`` (one per id) for the ids accounting does not know yet."""
    wanted = list(dict.fromkeys(str(job_id).strip() for job_id in job_ids))
    found: dict[str, JobStatus] = {}
    misses: dict[str, list[str]] = {job_id: [] for job_id in wanted}
    valid = [job_id for job_id in wanted if JOB_ID_PATTERN.fullmatch(job_id)]
    for job_id in set(wanted) - set(valid):
        misses[job_id].append("not a SLURM job id")

    _ask(valid, found, misses, "sacct", _sacct_statuses, runner)
    # accounting also learns of a start after the controller: on the mini-cluster sacct said
    # PENDING, with the first node alone, for 4 s after squeue said RUNNING on both; the
    # controller's word on a job accounting calls pending stands where it has one
    waiting = [job_id for job_id in valid if _not_started(found.get(job_id))]
    _ask(waiting, found, misses, "squeue", _squeue_statuses, runner)
    for job_id in valid:
        status = found.get(job_id)
        if status is None or (status.source == "squeue" and status.is_terminal):
            _ask([job_id], found, misses, "scontrol", _scontrol_statuses, runner)

    return {job_id: found.get(job_id) or _unknown(job_id, misses[job_id]) for job_id in wanted}


def _not_started(status: JobStatus | None) -> bool:
    return status is None or status.state is JobState.PENDING


def _ask(
    job_ids: list[str],
    found: dict[str, JobStatus],
    misses: dict[str, list[str]],
    source: str,
    query: Callable[[list[str], Runner], list[JobStatus]],
    runner: Runner,
) -> None:
    """Ask one source about ``job_ids``; record its answers in ``found``, its silence in
    ``misses``. A failing command is a miss, not an error: the next source may still know."""
    if not job_ids:
        return
    try:
        statuses = query(job_ids, runner)
    except AccountingError as error:
        for job_id in job_ids:
            misses[job_id].append(f"{source}: {error}")
        return
    for job_id in job_ids:
        status = _match(statuses, job_id)
        if status is None:
            misses[job_id].append(f"{source}: no record")
        else:
            found[job_id] = status


def sacct_argv(job_ids: Iterable[str]) -> list[str]:
    """The one ``sacct`` call that asks for the allocations of ``job_ids``."""
    return ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", ",".join(SACCT_FIELDS)]


def sacct_statuses(output: str) -> list[JobStatus]:
    """The statuses in the output of :func:`sacct_argv`'s call."""
    return [
        JobStatus(
            job_id=record.job_id,
            state=job_state(record.state),
            slurm_state=record.state,
            exit_code=record.exit_code,
            signal=record.signal,
            nodes=record.nodes,
            source="sacct",
        )
        for record in parse_sacct_output(output)
    ]


def sacct_status(output: str, job_id: str) -> JobStatus | None:
    """``job_id``'s status in :func:`sacct_argv`'s output; None while accounting does not know
    the job yet (it lags right after submission)."""
    return _match(sacct_statuses(output), job_id)


def _sacct_statuses(job_ids: list[str], runner: Runner) -> list[JobStatus]:
    return sacct_statuses(runner(sacct_argv(job_ids)))


def _squeue_statuses(job_ids: list[str], runner: Runner) -> list[JobStatus]:
    argv = ["squeue", "-h", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT]
    statuses = []
    for line in runner(argv).splitlines():
        fields = line.strip().split("|")
        if len(fields) != 3:
            continue  # a warning squeue printed on stdout, not a job
        job_id, raw_state, nodelist = fields
        state = normalise_state(raw_state)
        nodes = allocated_nodes(nodelist)
        statuses.append(JobStatus(job_id, job_state(state), state, None, None, nodes, "squeue"))
    return statuses


def _scontrol_statuses(job_ids: list[str], runner: Runner) -> list[JobStatus]:
    (job_id,) = job_ids
    output = runner(["scontrol", "show", "job", "-o", job_id])
    statuses, raw_ids = [], []
    for line in output.splitlines():
        fields = parse_scontrol_line(line)
        if "JobId" not in fields:
            continue
        raw_ids.append(fields["JobId"])
        state = normalise_state(fields.get("JobState", ""))
        code, _, signal = fields.get("ExitCode", "").partition(":")
        statuses.append(
            JobStatus(
                job_id=_scontrol_display_id(fields),
                state=job_state(state),
                slurm_state=state,
                exit_code=int(code) if code.isdigit() else None,
                signal=int(signal) if signal.isdigit() else None,
                nodes=allocated_nodes(fields.get("NodeList", "")),
                source="scontrol",
            )
        )
    matched = _match(statuses, job_id)
    if matched is not None:
        return [matched]
    # Asked by the raw id of an array task or het component (124 for 123_4): its own record.
    by_raw_id = [s for s, raw_id in zip(statuses, raw_ids, strict=True) if raw_id == job_id]
    return [dataclasses.replace(by_raw_id[-1], job_id=job_id)] if by_raw_id else []


def parse_scontrol_line(line: str) -> dict[str, str]:
    """``scontrol show job -o`` prints ``Key=value`` pairs; a word without ``=`` continues the
    previous value (``Command=/path with spaces``)."""
    fields: dict[str, str] = {}
    key = None
    for word in line.split():
        name, sep, value = word.partition("=")
        if sep and name:
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


def _scontrol_display_id(fields: dict[str, str]) -> str:
    """``JobId`` is the raw id; array tasks and het components are asked for as 123_4 / 123+0."""
    if fields.get("ArrayJobId") and fields.get("ArrayTaskId"):
        return f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"
    if fields.get("HetJobId") and fields.get("HetJobOffset"):
        return f"{fields['HetJobId']}+{fields['HetJobOffset']}"
    return fields["JobId"]


def _match(statuses: list[JobStatus], job_id: str) -> JobStatus | None:
    """The record for ``job_id``; else one standing for all its array tasks/het components."""
    exact = [s for s in statuses if s.job_id == job_id]
    if exact:
        return exact[-1]  # a requeued job appears once per run; the last line is the latest
    parts = [s for s in statuses if s.job_id.startswith((f"{job_id}_", f"{job_id}+"))]
    if not parts:
        return None
    unfinished = [s for s in parts if not s.is_terminal]
    unsuccessful = [s for s in parts if s.state is not JobState.SUCCEEDED]
    return dataclasses.replace((unfinished or unsuccessful or parts)[0], job_id=job_id)


def _unknown(job_id: str, misses: list[str]) -> JobStatus:
    reason = "; ".join(misses) or "no source asked"
    return JobStatus(job_id, JobState.UNKNOWN, "UNKNOWN", None, None, (), "none", reason)


FAILED_RUN_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})
"""States in which SLURM ends one run of a job and requeues it itself (``JobRequeue=1``):
work was lost, so each such run is an attempt of its own. A ``REQUEUED`` run is submitit's
checkpoint-and-requeue on USR2: nothing lost, the same attempt goes on."""


@dataclass(frozen=True)
class JobRun:
    """One run of a job id. SLURM requeues a job under the same id; ``sacct -D`` lists each run."""

    slurm_state: str
    nodes: tuple[str, ...]
    started_at: float | None
    """Epoch seconds; None while it has not started (``Unknown``)."""
    ended_at: float | None


def job_runs(job_id: str, runner: Runner = run_command) -> list[JobRun]:
    """Every run of ``job_id`` in the order SLURM made them (the last is the current one);
    empty when accounting does not know the job (yet) or cannot be asked."""
    fields = "JobID,State,NodeList,Start,End"
    argv = ["sacct", "-D", "-X", "-n", "-P", "-j", str(job_id), "-o", fields]
    try:
        text = runner(argv)
    except AccountingError:
        return []
    runs = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5 or fields[0] != str(job_id):
            continue
        _, state, nodelist, start, end = fields
        try:
            nodes = allocated_nodes(nodelist)
        except NodeListError:
            nodes = ()
        runs.append(JobRun(normalise_state(state).upper(), nodes, _epoch(start), _epoch(end)))
    return runs


def _epoch(stamp: str) -> float | None:
    """sacct's local ``2026-12-01T11:28:29`` as epoch seconds; ``Unknown``/``None`` -> None."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
