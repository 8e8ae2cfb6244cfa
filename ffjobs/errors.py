"""Errors a user can cause: printed as one line, never as a traceback."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    """The stage ran and its verdict is negative (validation policy failed, preflight FAIL)."""
    USAGE = 2
    """Bad input: config, arguments, paths. Nothing was started."""
    RETRYABLE = 3
    """A failure worth retrying (communicator failure, node failure, preemption)."""
    CANCELLED = 4
    """A person cancelled the training (``scancel``, an Airflow kill, Ctrl-C on ``ffjobs train
    --submit --wait``): stopped, not retried; ``ffjobs run --resume`` continues it."""
    STORAGE = 5
    """Storage refused a write (no space left, over quota, read-only, access denied): not
    retried; free space or fix access, then ``ffjobs run --resume`` continues."""
    INTERRUPTED = 130


FAILURE_EXIT_CODES = {"cancelled": ExitCode.CANCELLED, "storage": ExitCode.STORAGE}
"""Training failure kinds (``ffjobs.slurm.failures.FailureKind`` values) with an exit code of
their own; any other failure exits 3 when retryable, else 1."""


def failure_exit_code(kind: str | None, retryable: bool) -> ExitCode:
    """The exit code of a training that failed with ``kind`` (a ``FailureKind`` value), on
    this machine's ranks or on SLURM alike: its own (:data:`FAILURE_EXIT_CODES`), else
    RETRYABLE or FAILED."""
    if kind in FAILURE_EXIT_CODES:
        return FAILURE_EXIT_CODES[kind]
    return ExitCode.RETRYABLE if retryable else ExitCode.FAILED


class UserError(Exception):
    """An expected mistake; ``str()`` says what was wrong, where, and what to do."""

    exit_code: ExitCode = ExitCode.USAGE
