"""The validation facts cache is opened by several processes at once (every rank of a job
indexes the same data set on a new node): none of them may fail on sqlite's lock. Seen once
in a two-rank CPU test: "database is locked" from the switch to WAL, at once, not after the
busy timeout (sqlite does not wait where waiting could deadlock)."""

from __future__ import annotations

import sqlite3

from ffjobs.data.cache import _use_wal


class _LockedTwice:
    """A connection whose first two mode changes meet another process's lock."""

    def __init__(self):
        self.attempts = 0

    def execute(self, sql):
        if sql == "PRAGMA journal_mode":
            return sqlite3.connect(":memory:").execute("SELECT 'delete'")
        self.attempts += 1
        if self.attempts <= 2:
            raise sqlite3.OperationalError("database is locked")
        return None


def test_switching_to_wal_waits_for_another_process_lock():
    connection = _LockedTwice()
    _use_wal(connection, patience_s=5)
    assert connection.attempts == 3
