"""A job's state from SLURM accounting (``sacct``): what happened to it, on which nodes, how long.

``sacct`` is the one source that still knows a job after it left the queue, which is what the
retry path needs after a rank was torn down. States are normalised (``CANCELLED by 0`` ->
``CANCELLED``, ``RUNNING+`` -> ``RUNNING``). Slurm 22.05 briefly records a finished multi-node job
with only its first node (``COMPLETED|node1`` before ``COMPLETED|node[1-2]``), so ``NNodes`` is read
too and a record counts as settled only once its node list is whole.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ffjobs.errors import UserError
from ffjobs.slurm.nodes import NodeListError, expand_nodelist

SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList", "Elapsed", "NNodes")
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "TIMEOUT", "REVOKED",
})  # fmt: skip

Runner = Callable[[Sequence[str]], str]
"""Runs a command and returns its stdout; raises ``AccountingError`` when it fails."""


class AccountingError(UserError):
    """``sacct`` is missing or failed (accounting storage down, bad ``SLURM_CONF``)."""


@dataclass(frozen=True)
class JobAccounting:
    """One job allocation as SLURM accounting records it."""

    job_id: str
    state: str
    """Normalised state name, e.g. ``COMPLETED``, ``CANCELLED``, ``NODE_FAIL``, ``RUNNING``."""
    raw_state: str
    """The state as ``sacct`` printed it, e.g. ``CANCELLED by 0``."""
    exit_code: int
    signal: int
    """Signal that ended the batch script, 0 if none."""
    nodes: tuple[str, ...]
    """Node names, expanded from SLURM's compressed list (``node[1-2]`` -> node1, node2)."""
    elapsed_s: int
    node_count: int
    """Nodes of the allocation (``NNodes``); ``nodes`` may lag behind it right after the end."""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def settled(self) -> bool:
        """Finished, and accounting has written the whole node list (none if it never ran)."""
        return self.finished and (not self.nodes or len(self.nodes) == self.node_count)


def run_command(argv: Sequence[str], timeout: float = 60.0) -> str:
    """The default runner: the real command, with its failure turned into ``AccountingError``.
    Every SLURM client call of ffjobs goes through it, or through :func:`run_command_async`."""
    try:
        result = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise _not_found(argv) from None
    except subprocess.TimeoutExpired:
        raise _no_answer(argv, timeout) from None
    if result.returncode != 0:
        raise _failed(argv, result.returncode, result.stderr)
    return result.stdout


async def run_command_async(argv: Sequence[str], timeout: float = 60.0) -> str:
    """:func:`run_command` for the Airflow triggerer, whose event loop every blocking call would
    stall for all the triggers it runs: the command runs on a worker thread. (An asyncio
    subprocess is started on the loop's own thread, which waits there until the child has
    exec'd, on a busy machine long enough to stall every trigger, at every poll of every
    job.)"""
    import asyncio

    return await asyncio.to_thread(run_command, argv, timeout)


def _not_found(argv: Sequence[str]) -> AccountingError:
    return AccountingError(
        f"'{argv[0]}' not found on PATH; SLURM client tools are needed to read job state"
    )


def _no_answer(argv: Sequence[str], timeout: float) -> AccountingError:
    return AccountingError(f"'{' '.join(argv)}' did not answer within {timeout:g} s")


def _failed(argv: Sequence[str], returncode: int | None, stderr: str) -> AccountingError:
    detail = (stderr.strip().splitlines() or ["no error output"])[-1]
    return AccountingError(
        f"'{' '.join(argv)}' failed (exit {returncode}): {detail}; is slurmdbd up "
        "and SLURM_CONF pointing at the cluster?")  # fmt: skip


def normalise_state(raw: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``RUNNING+`` (truncated) -> ``RUNNING``."""
    words = raw.strip().split()
    return words[0].rstrip("+") if words else "UNKNOWN"


def parse_elapsed(text: str) -> int:
    """SLURM durations ``[D-]HH:MM:SS``, ``MM:SS`` (optionally ``.mmm``) -> whole seconds."""
    days, _, clock = text.strip().rpartition("-")
    parts = [float(p) for p in clock.split(":")] if clock else [0.0]
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return int(seconds + (int(days) * 86400 if days else 0))


def allocated_nodes(nodelist: str) -> tuple[str, ...]:
    """The nodes of ``sacct``'s ``NodeList`` field; none while the job is pending."""
    if nodelist.strip() in ("None assigned", "(null)"):
        return ()
    return tuple(expand_nodelist(nodelist))


def parse_sacct_line(line: str) -> JobAccounting:
    """Parse one ``sacct -P -o JobID,State,ExitCode,NodeList,Elapsed,NNodes`` line."""
    fields = line.rstrip("\n").split("|")
    if len(fields) != len(SACCT_FIELDS):
        raise AccountingError(
            f"unexpected sacct output {line!r}: expected {len(SACCT_FIELDS)} '|'-separated "
            f"fields ({','.join(SACCT_FIELDS)})")  # fmt: skip
    job_id, raw_state, exit_code, nodelist, elapsed, node_count = fields
    code, _, signal = exit_code.partition(":")
    try:
        nodes = allocated_nodes(nodelist)
    except NodeListError as exc:
        raise AccountingError(f"unexpected sacct output {line!r}: {exc}") from None
    return JobAccounting(
        job_id=job_id,
        state=normalise_state(raw_state),
        raw_state=raw_state.strip(),
        exit_code=int(code or 0),
        signal=int(signal or 0),
        nodes=nodes,
        elapsed_s=parse_elapsed(elapsed),
        node_count=int(node_count or 0),
    )


def parse_sacct_output(text: str) -> list[JobAccounting]:
    """Parse every non-blank line of ``sacct -P -o JobID,State,ExitCode,NodeList,Elapsed,NNodes``."""
    return [parse_sacct_line(line) for line in text.splitlines() if line.strip()]
