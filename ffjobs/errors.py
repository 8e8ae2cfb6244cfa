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
    INTERRUPTED = 130


class UserError(Exception):
    """An expected mistake; ``str()`` says what was wrong, where, and what to do."""

    exit_code: ExitCode = ExitCode.USAGE
