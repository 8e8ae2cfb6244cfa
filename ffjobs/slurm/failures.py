"""What ended a training job, whether a retry can help, and which nodes to suspect.

A pure function over what a finished job leaves behind (its SLURM state, exit codes and every
rank's stdout/stderr), for the retry supervisor: no SLURM, no subprocess, standard library only.
Lines at INFO level (``NCCL INFO``, c10d ``[I...]``) are never evidence: healthy runs print
plenty of words like "failed" and "closed" there.

Precedence, first match wins:

1. SLURM ``NODE_FAIL``/``BOOT_FAIL`` (or slurmstepd's "DUE TO NODE FAILURE") -> NODE_FAILURE,
   retryable: the hardware went away, whatever the logs say happened after it.
2. ``PREEMPTED`` (or "DUE TO PREEMPTION") -> PREEMPTION, retryable.
3. ``TIMEOUT``/``DEADLINE`` (or "DUE TO TIME LIMIT") -> TIMEOUT, retryable: resume from the
   latest checkpoint.
4. ``OUT_OF_MEMORY`` or an OOM line on any rank -> OUT_OF_MEMORY, not retryable: nothing
   changes before a retry, so it would run out of memory again. A rank that runs out of memory makes its peers' collectives fail, so its
   OOM outranks their communicator errors.
4a. A rank's last traceback ends in a storage error (ffjobs' ``StorageError`` naming the
   checkpoint folder and its free space; ENOSPC, EDQUOT, EROFS, EACCES; S3 ``AccessDenied``)
   -> STORAGE, not retryable: the same write fails until someone frees space or fixes access
   (then an explicit resume continues). It outranks the peers' errors, as OOM does.
5. A rank's last traceback ends in a missing or changed dataset file (not a checkpoint, not a
   config file), or in ffjobs refusing a dataset that changed since its validation -> DATA,
   never retryable: the same file is missing next time.
6. ffjobs' own ``ffjobs: error:``, ``ConfigError``/``UserError``, sbatch rejecting the job, NCCL
   reporting invalid usage -> CONFIG, not retryable on the same config.
7. A rank crashed with a traceback of its own and no communicator error, while its peers report
   communicator errors -> USER_CODE: the peers only lost the crashed rank.
8. Communicator evidence on any rank (NCCL, gloo, c10d store/network errors) -> COMMUNICATOR,
   retryable with the suspect nodes excluded.
9. Any other traceback -> USER_CODE, not retryable.
10. Nothing recognised -> UNKNOWN, retryable: the supervisor's attempt budget bounds it, and an
    unreadable end (a rank killed with no log) is more often the machine than the code. A job
    ``CANCELLED`` with nothing in its logs is not retried: someone cancelled it on purpose.

A person's cancel is not classified here: the supervisor knows from accounting and ffjobs'
own note (:mod:`ffjobs.slurm.cancels`) who cancelled a job, and a cancel that ffjobs did not
make after a rank failure is CANCELLED (:func:`cancel_failure`), never retried.

Suspect nodes (COMMUNICATOR, NODE_FAILURE and UNKNOWN only; they are the nodes to exclude on a
retry) are the first culprit found of: a rank killed by a signal that reported no
communicator error itself (the others are its victims); the ranks without a communicator error
while all others have one (the hung or vanished peer); the peers that NCCL/gloo lines name, when
the name or address maps to a rank's node. For NODE_FAILURE, the nodes SLURM named come first.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from ffjobs.slurm.signatures import (
    CHECKPOINT_SUFFIXES,
    COMMUNICATOR_SIGNATURES,
    CONFIG_SIGNATURES,
    CONFIG_SUFFIXES,
    DATA_ERROR,
    DATASET_CHANGED,
    EXCEPTION_LINE,
    FIRST_NAMED,
    INFO_LINE,
    OOM_SIGNATURES,
    OWN_ADDRESS,
    PATH_TOKEN,
    PEER,
    QUOTED,
    RANK_PREFIX,
    SLURM_CANCEL_REASON,
    SLURM_NODE_FAILURE,
    SRUN_STEP_ENDING,
    SRUN_TASK_SIGNALLED,
    STORAGE_DETAIL,
    STORAGE_ERROR,
    STORAGE_WHAT,
    TRACEBACK_HEADER,
    WEAK_OOM,
    WRAPPER_EXCEPTIONS,
)

MAX_LOG_BYTES = 1 << 20
"""Only the tail of each rank's log is read: the end is where a job's failure is written."""
MAX_EVIDENCE = 10
MAX_EVIDENCE_CHARS = 300
TRACEBACK_LINES = 15


class FailureKind(StrEnum):
    COMMUNICATOR = "communicator"
    NODE_FAILURE = "node_failure"
    PREEMPTION = "preemption"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    USER_CODE = "user_code"
    CONFIG = "config"
    DATA = "data"
    STORAGE = "storage"
    """The checkpoint store (or another file system or bucket) refused a write: full, over
    quota, read-only or access denied."""
    CANCELLED = "cancelled"
    """A person cancelled the job (``scancel``, an Airflow kill, Ctrl-C on ``--wait``)."""
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Failure:
    """The verdict on one failed job."""

    kind: FailureKind
    retryable: bool
    summary: str
    """One line for a person, e.g. ``communicator failure (gloo); suspect node2; retryable``."""
    evidence: tuple[str, ...] = ()
    """The lines that decided it, each prefixed with its origin (``rank 1 (node2): ...``)."""
    suspect_nodes: tuple[str, ...] = ()
    traceback_excerpt: str | None = None
    """USER_CODE and DATA: the last lines of the traceback that ended the job."""
    data_file: str | None = None
    """DATA: the dataset file that vanished or changed, as the error named it."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (enum as its value, tuples as lists)."""
        out = asdict(self)
        out["kind"] = self.kind.value
        out["evidence"] = list(self.evidence)
        out["suspect_nodes"] = list(self.suspect_nodes)
        return out


@dataclass
class RankLog:
    """What one rank left behind."""

    rank: int
    node: str | None
    text: str
    exit_code: int | None = None
    """Negative: killed by that signal (``-9`` = SIGKILL); None: unknown (the rank never ended
    cleanly as far as anyone saw)."""


def read_rank_logs(
    paths_by_rank: Mapping[int, Path],
    nodes_by_rank: Mapping[int, str | None] | None = None,
    exit_codes_by_rank: Mapping[int, int | None] | None = None,
) -> list[RankLog]:
    """One :class:`RankLog` per rank from its log file; missing or undecodable files are tolerated.

    Each file's last :data:`MAX_LOG_BYTES` are read and decoded with replacement characters; a
    file that is missing or unreadable gives an empty text (the rank left nothing). Ranks absent
    from ``nodes_by_rank``/``exit_codes_by_rank`` get None.
    """
    nodes, codes = nodes_by_rank or {}, exit_codes_by_rank or {}
    return [
        RankLog(rank, nodes.get(rank), _read_tail(paths_by_rank[rank]), codes.get(rank))
        for rank in sorted(paths_by_rank)
    ]


def _read_tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - MAX_LOG_BYTES))
            data = handle.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


@dataclass
class _Traceback:
    lines: list[str]
    """Header, frames, the exception line and its continuation lines."""
    exception_at: int
    """Index of the exception line in ``lines``."""
    exception_type: str
    message: str

    @property
    def short_type(self) -> str:
        return self.exception_type.rsplit(".", 1)[-1]

    @property
    def ending(self) -> str:
        """The exception line and what follows it (NCCL puts its detail on further lines)."""
        return "\n".join(self.lines[self.exception_at :])

    @property
    def exception_line(self) -> str:
        return self.lines[self.exception_at]


@dataclass
class _RankFindings:
    log: RankLog
    lines: list[str]
    """The log's non-INFO lines, rank prefixes stripped."""
    communicator: list[tuple[str, str]] = field(default_factory=list)
    oom: list[tuple[str, str]] = field(default_factory=list)
    config: list[tuple[str, str]] = field(default_factory=list)
    traceback: _Traceback | None = None
    signalled: int | None = None
    """The signal that srun says ended this rank (its exit code, the job's, does not tell)."""

    @property
    def origin(self) -> str:
        node = f" ({self.log.node})" if self.log.node else ""
        return f"rank {self.log.rank}{node}"

    @property
    def killed_by(self) -> int | None:
        code = self.log.exit_code
        return -code if code is not None and code < 0 else self.signalled

    def evidence(self, matches: Iterable[tuple[str, str]]) -> list[str]:
        return [f"{self.origin}: {line.strip()[:MAX_EVIDENCE_CHARS]}" for _, line in matches]


def classify_failure(
    state: str | None,
    exit_code: int | None,
    ranks: Sequence[RankLog],
    *,
    lost_nodes: Sequence[str] = (),
) -> Failure:
    """Decide what ended a job: kind, whether to retry, evidence, suspect nodes.

    ``state`` is the normalised SLURM job state (None for a local launch), ``exit_code`` the
    job's, ``ranks`` what each rank printed. See the module docstring for the precedence.

    ``lost_nodes`` are nodes of the job that the controller stopped reaching (``sinfo``: down or
    not responding; or still not done with a job cancelled after its ranks failed). Only the
    controller knows that: a cut link looks the same from both ends in the ranks' logs. On a
    retryable failure they become the first suspects, with that as evidence; a fatal failure
    stays fatal whatever the nodes did.
    """
    failure = _classify(state, exit_code, ranks)
    lost = [n for n in dict.fromkeys(lost_nodes) if n not in failure.suspect_nodes]
    if not lost or not failure.retryable:
        return failure
    seen = tuple(f"slurmctld: {node} stopped responding during the job" for node in lost)
    return Failure(
        kind=failure.kind,
        retryable=True,
        summary=failure.summary.replace(f"suspect {_names(())}", f"suspect {_names(lost)}")
        + f"; {', '.join(lost)} stopped responding",
        evidence=(*seen, *failure.evidence),
        suspect_nodes=(*lost, *failure.suspect_nodes),
        traceback_excerpt=failure.traceback_excerpt,
    )


def _classify(state: str | None, exit_code: int | None, ranks: Sequence[RankLog]) -> Failure:
    findings = _scan_ranks(ranks)
    state = (state or "").upper()
    if state in ("", "CANCELLED"):  # PreemptMode=CANCEL and scancel both record CANCELLED
        state = _state_from_logs(findings) or state
    state_line = [f"slurm: job state {state}"] if state else []

    if state in ("NODE_FAIL", "BOOT_FAIL"):
        reports = [(f, m) for f in findings for m in map(SLURM_NODE_FAILURE.search, f.lines) if m]
        suspects = (
            _unique(m.group(1) for _, m in reports)
            or _culprit_nodes(findings)
            or _unfinished_nodes(findings)
        )
        return Failure(
            kind=FailureKind.NODE_FAILURE,
            retryable=True,
            summary=f"node failure ({state}); suspect {_names(suspects)}; retry without them",
            evidence=_cap(state_line + [f"{f.origin}: {m.string.strip()}" for f, m in reports]),
            suspect_nodes=suspects,
        )
    if state == "PREEMPTED":
        return Failure(
            kind=FailureKind.PREEMPTION,
            retryable=True,
            summary="preempted by SLURM; a retry resumes from the latest checkpoint",
            evidence=_cap(state_line),
        )
    if state in ("TIMEOUT", "DEADLINE"):
        return Failure(
            kind=FailureKind.TIMEOUT,
            retryable=True,
            summary=f"hit the time limit ({state}); a retry resumes from the latest checkpoint",
            evidence=_cap(state_line),
        )

    oom = [f for f in findings if f.oom]
    if state == "OUT_OF_MEMORY" or oom:
        where = ", ".join(f.origin for f in oom) or "the job"
        return Failure(
            kind=FailureKind.OUT_OF_MEMORY,
            retryable=False,
            summary=f"out of memory on {where}; not retried: lower the batch size",
            evidence=_cap(
                (state_line if state == "OUT_OF_MEMORY" else [])
                + [e for f in oom for e in f.evidence(f.oom)]
            ),
        )

    for f in findings:
        detail = _storage_error(f.traceback)
        if f.traceback is not None and detail is not None:
            return Failure(
                kind=FailureKind.STORAGE,
                retryable=False,
                summary=f"storage error on {f.origin}: {detail}; not retried: free space or fix "
                "access, then resume the run",
                evidence=_cap(f.evidence([("", f.traceback.exception_line)])),
                traceback_excerpt=_excerpt(f.traceback),
            )

    for f in findings:
        data_file = _data_file(f.traceback)
        if f.traceback is not None and data_file is not None:
            changed = DATASET_CHANGED.search(f.traceback.message)
            summary = (
                f"dataset changed since validation, training refused on {f.origin}: "
                f"{changed.group(1)}; not retried"
                if changed
                else f"dataset file missing or changed on {f.origin}: {data_file or '?'}; "
                "re-validate the dataset, not retried"
            )
            return Failure(
                kind=FailureKind.DATA,
                retryable=False,
                summary=summary,
                evidence=_cap(f.evidence([("", f.traceback.exception_line)])),
                traceback_excerpt=_excerpt(f.traceback),
                data_file=data_file or None,
            )

    config = [f for f in findings if f.config]
    if config:
        first = config[0]
        return Failure(
            kind=FailureKind.CONFIG,
            retryable=False,
            summary=f"configuration error ({first.config[0][0]}) on {first.origin}; "
            "fix it, not retried",
            evidence=_cap(e for f in config for e in f.evidence(f.config)),
        )

    communicator = [f for f in findings if f.communicator]
    # a Python exception exits with a status, not a signal: a killed rank's traceback is older
    crashed = [f for f in findings if f.traceback and not f.communicator and not f.killed_by]
    if crashed:
        first, traceback = crashed[0], crashed[0].traceback
        assert traceback is not None
        lost = f"; {len(communicator)} peer rank(s) lost it" if communicator else ""
        return Failure(
            kind=FailureKind.USER_CODE,
            retryable=False,
            summary=f"{traceback.short_type} on {first.origin}{lost}; not retried",
            evidence=_cap(first.evidence([("", traceback.exception_line)])),
            traceback_excerpt=_excerpt(traceback),
        )

    suspects = _culprit_nodes(findings)
    if communicator:
        recognised = _unique(name for f in communicator for name, _ in f.communicator)
        culprits_first = sorted(communicator, key=lambda f: f.log.node not in suspects)
        return Failure(
            kind=FailureKind.COMMUNICATOR,
            retryable=True,
            summary=f"communicator failure ({', '.join(recognised[:3])}) on "
            f"{len(communicator)} rank(s); suspect {_names(suspects)}; retryable",
            evidence=_cap(
                _killed_lines(findings)
                + [e for f in culprits_first for e in f.evidence(f.communicator)]
            ),
            suspect_nodes=suspects,
        )

    if state == "CANCELLED":
        return Failure(
            kind=FailureKind.UNKNOWN,
            retryable=False,
            summary="cancelled with no failure in the logs; not retried",
            evidence=_cap(state_line),
        )
    code = f"exit code {exit_code}" if exit_code is not None else "no exit code"
    killed = _killed_lines(findings)
    return Failure(
        kind=FailureKind.UNKNOWN,
        retryable=True,
        summary=f"unrecognised failure ({state or 'local launch'}, {code}"
        + (f"; {killed[0]}" if killed else "")
        + f"); suspect {_names(suspects)}; retryable within the attempt budget",
        evidence=_cap(state_line + killed),
        suspect_nodes=suspects,
    )


# --- per-rank scanning ------------------------------------------------------------------------


def _scan_ranks(ranks: Sequence[RankLog]) -> list[_RankFindings]:
    """Each rank's findings, in rank order, with the signal srun says ended it, if any."""
    signalled = _srun_signalled(ranks)
    return [_scan(log, signalled.get(log.rank)) for log in sorted(ranks, key=lambda log: log.rank)]


def _scan(log: RankLog, signalled: int | None = None) -> _RankFindings:
    lines = [RANK_PREFIX.sub("", line).rstrip() for line in log.text.splitlines()]
    findings = _RankFindings(
        log, [line for line in lines if not INFO_LINE.search(line)], signalled=signalled
    )
    killed = findings.killed_by == signal.SIGKILL or log.exit_code == 137
    for line in findings.lines:
        for target, signatures in (
            (findings.communicator, COMMUNICATOR_SIGNATURES),
            (findings.oom, OOM_SIGNATURES),
            (findings.config, CONFIG_SIGNATURES),
        ):
            name = next((name for name, pattern in signatures if pattern.search(line)), None)
            if name is not None:
                target.append((name, line))
        if killed and not findings.oom and WEAK_OOM.search(line):
            findings.oom.append(("killed with an OOM line", line))
    for group in (findings.communicator, findings.oom, findings.config):
        group[:] = _dedup(group)
    findings.traceback = _last_traceback(lines)
    return findings


SIGNAL_BY_TEXT = {
    "Hangup": signal.SIGHUP,
    "Interrupt": signal.SIGINT,
    "Illegal instruction": signal.SIGILL,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
    "Floating point exception": signal.SIGFPE,
    "Killed": signal.SIGKILL,
    "Segmentation fault": signal.SIGSEGV,
    "Terminated": signal.SIGTERM,
}
"""strsignal(3)'s texts, as srun prints them, and their signals."""


def _srun_signalled(ranks: Sequence[RankLog]) -> dict[int, int]:
    """The ranks that srun's first report of a task ended by a signal names, and the signal.

    Only a report made before the step was being ended counts, and only the first: the tasks
    that a cancel or ``--kill-on-bad-exit`` then stops are reported too, ended by the signal
    that stopped them, and are not the cause. srun prints to the batch step's log, rank 0's.
    """
    for log in ranks:
        for line in log.text.splitlines():
            if SRUN_STEP_ENDING.search(line):
                break
            match = SRUN_TASK_SIGNALLED.search(line)
            if match:
                signum = SIGNAL_BY_TEXT[match.group(3)]
                return {rank: signum for rank in _task_ranks(match.group(2))}
    return {}


def _task_ranks(tasks: str) -> list[int]:
    """srun's task list ("1", "0-1,3") as ranks."""
    ranks = []
    for part in tasks.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            ranks += range(int(first), int(last or first) + 1)
    return ranks


def _dedup(matches: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The first line of each signature: the watchdog repeats itself per collective and again in
    the exception that ends the process."""
    first: dict[str, str] = {}
    for name, line in matches:
        first.setdefault(name, line)
    return list(first.items())


def _last_traceback(lines: list[str]) -> _Traceback | None:
    """The last traceback that is not a launcher's wrapper; None if the rank printed none."""
    found = None
    for start, line in enumerate(lines):
        if not TRACEBACK_HEADER.match(line):
            continue
        block = [line.strip()]
        for follow in lines[start + 1 :]:
            if follow.startswith((" ", "\t")):
                block.append(follow)
                continue
            match = EXCEPTION_LINE.match(follow)
            if match is None:
                break  # not a traceback after all, or a truncated one
            at = len(block)
            block.append(follow)
            block += _continuation(lines, start + len(block))
            if not match.group("type").endswith(WRAPPER_EXCEPTIONS):
                found = _Traceback(block, at, match.group("type"), match.group("message") or "")
            break
    return found


def _continuation(lines: list[str], start: int, limit: int = 4) -> list[str]:
    """Lines continuing an exception's message, up to the next blank, log or traceback line."""
    out = []
    for line in lines[start : start + limit]:
        if not line.strip() or line.startswith(("[", " ")) or TRACEBACK_HEADER.match(line):
            break
        out.append(line)
    return out


def _excerpt(traceback: _Traceback) -> str:
    return "\n".join(traceback.lines[-TRACEBACK_LINES:])


def _storage_error(traceback: _Traceback | None) -> str | None:
    """What storage refused, in a few words with the path, if a traceback ends in a storage
    error; None otherwise. ffjobs' ``StorageError`` says it all (folder, file, free space)."""
    if traceback is None:
        return None
    ending = " ".join(line.strip() for line in traceback.lines[traceback.exception_at :])
    if not STORAGE_ERROR.search(ending):
        return None
    own = STORAGE_DETAIL.search(ending)
    if own is not None:
        return own.group(1).strip()
    what = next((words for pattern, words in STORAGE_WHAT if pattern.search(ending)), "refused")
    quoted = [a or b for a, b in QUOTED.findall(traceback.message)]
    s3 = re.search(r"calling the (\w+) operation", ending)
    where = f" on {quoted[-1]}" if quoted else f" ({s3.group(1)})" if s3 else ""
    return f"{what}{where}"


def storage_error(text: str) -> str | None:
    """What storage refused, in one phrase with the path, if the last traceback in ``text`` (a
    rank's log) ends in a storage error; None otherwise."""
    lines = [RANK_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    return _storage_error(_last_traceback(lines))


def cancel_failure(
    ranks: Sequence[RankLog], cancelled_by: str | None, checkpoint_step: int | None = None
) -> Failure | None:
    """The verdict on a job that was CANCELLED and not by ffjobs after a rank failure: a
    person's cancel, never retried; ``cancelled_by`` says who and through what. None when
    slurmstepd's banner says SLURM itself ended it (node failure, pre-emption, time limit:
    ``PreemptMode=CANCEL`` records those as CANCELLED), which :func:`classify_failure` reads."""
    findings = _scan_ranks(ranks)
    if _state_from_logs(findings):
        return None
    who = cancelled_by or "someone accounting does not name"
    resume = (
        f"an explicit resume continues from step {checkpoint_step}"
        if checkpoint_step is not None
        else "an explicit resume starts it again"
    )
    return Failure(
        kind=FailureKind.CANCELLED,
        retryable=False,
        summary=f"cancelled by {who}; not retried ({resume})",
        evidence=(f"slurm: job state CANCELLED by {who}",),
    )


def _data_file(traceback: _Traceback | None) -> str | None:
    """The dataset file a traceback's exception names; "" if unnamed; None if not a data error."""
    if traceback is None:
        return None
    message = traceback.message
    changed = DATASET_CHANGED.search(message)
    if changed:  # ffjobs' own refusal: the first file it names
        first = FIRST_NAMED.search(changed.group(1))
        return first.group(1) if first else ""
    if traceback.short_type != "FileNotFoundError" and not DATA_ERROR.search(message):
        return None
    quoted = [a or b for a, b in QUOTED.findall(message)]
    candidates = quoted or PATH_TOKEN.findall(message)
    path = next((c for c in reversed(candidates) if "/" in c or PurePosixPath(c).suffix), None)
    if path is None:
        # a missing command or library is not data; a data error need not name its file
        return "" if traceback.short_type != "FileNotFoundError" else None
    name = PurePosixPath(path.lower())
    if "checkpoint" in path.lower() or name.suffix in CHECKPOINT_SUFFIXES:
        return None
    if name.suffix in CONFIG_SUFFIXES or "config" in name.name:
        return None
    return path


# --- job-level helpers ------------------------------------------------------------------------


def _state_from_logs(findings: list[_RankFindings]) -> str:
    """The state slurmstepd's cancel banner implies (PreemptMode=CANCEL records CANCELLED)."""
    reasons = {"NODE FAILURE": "NODE_FAIL", "PREEMPTION": "PREEMPTED", "TIME LIMIT": "TIMEOUT"}
    for f in findings:
        for line in f.lines:
            match = SLURM_CANCEL_REASON.search(line)
            if match and match.group(1).strip() in reasons:
                return reasons[match.group(1).strip()]
    return ""


def _culprit_nodes(findings: list[_RankFindings]) -> tuple[str, ...]:
    """Nodes of the ranks that failed first; their peers' errors are only the echo."""
    talking = [f for f in findings if f.communicator]
    # a rank killed by a signal that did not report a communicator error is the cause
    killed = [f for f in findings if f.killed_by and not f.communicator]
    # a rank silent (and not finished) while the others report communicator errors hung or
    # vanished; silent ranks outnumbering the reporters were more likely torn down afterwards
    silent = [f for f in findings if not f.communicator and f.log.exit_code != 0]
    for culprits in (killed, silent):
        nodes = _unique(f.log.node for f in culprits)
        if nodes and talking and len(culprits) <= len(talking):
            return nodes
    if killed and not talking:  # the launcher stopped the others before they noticed
        return _unique(f.log.node for f in killed)
    return _named_peers(findings)


def _named_peers(findings: list[_RankFindings]) -> tuple[str, ...]:
    """Nodes that communicator lines name as the remote peer, by host name or by address."""
    nodes = {f.log.node for f in findings if f.log.node}
    address_to_node = {
        match.group(1): f.log.node
        for f in findings
        if f.log.node
        for line in f.log.text.splitlines()
        if (match := OWN_ADDRESS.search(line))
    }
    named = []
    for f in findings:
        for _, line in f.communicator:
            for match in PEER.finditer(line):
                peer = match.group(1) or match.group(2)
                node = address_to_node.get(peer) or (
                    peer.split(".")[0] if peer.split(".")[0] in nodes else None
                )
                if node and node != f.log.node:
                    named.append(node)
    return _unique(named)


def _unfinished_nodes(findings: list[_RankFindings]) -> tuple[str, ...]:
    """Nodes of ranks with no recorded end (a node that died takes its exit codes along)."""
    return _unique(f.log.node for f in findings if f.log.exit_code is None and f.log.node)


def _killed_lines(findings: list[_RankFindings]) -> list[str]:
    lines = []
    for f in findings:
        if f.killed_by and not f.communicator:
            try:
                name = signal.Signals(f.killed_by).name
            except ValueError:
                name = "an unknown signal"
            lines.append(f"{f.origin}: killed by signal {f.killed_by} ({name})")
    return lines


def _unique(items: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for item in items if item))


def _names(nodes: Sequence[str]) -> str:
    return ", ".join(nodes) if nodes else "none identified"


def _cap(lines: Iterable[str]) -> tuple[str, ...]:
    return _unique(lines)[:MAX_EVIDENCE]
