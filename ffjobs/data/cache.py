"""Incremental validation cache: per-file facts keyed by (source, path, size, mtime or ETag),
and the last report of each source keyed by a digest of its whole listing.

A small SQLite file (one per machine by default, ``$FFJOBS_CACHE_DIR`` or
``$XDG_CACHE_HOME/ffjobs``, else ``~/.cache/ffjobs``), so re-validating an unchanged dataset
reads no image, and a file whose size or version changed is inspected again.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from ffjobs.data.sources import FileStat

SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    version TEXT NOT NULL,
    salt TEXT NOT NULL,
    sha256 TEXT,
    facts TEXT NOT NULL,
    PRIMARY KEY (source, path)
);
CREATE TABLE IF NOT EXISTS reports (
    source TEXT PRIMARY KEY,
    listing TEXT NOT NULL,
    report TEXT NOT NULL
)
"""


def default_cache_dir() -> Path:
    """Where the validation cache lives unless ``data.validation.cache_dir`` says otherwise."""
    if os.environ.get("FFJOBS_CACHE_DIR"):
        return Path(os.environ["FFJOBS_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ffjobs"


class FactsSnapshot:
    """Cached rows of one source, read once: which files are unchanged, and their facts."""

    def __init__(self, rows: dict[str, tuple[int, str, str, str | None, str]], salt: str):
        self._rows = rows
        self._salt = salt

    def fresh(self, stat: FileStat) -> bool:
        """Whether the cached facts of this file still hold (same size, version and salt)."""
        row = self._rows.get(stat.path)
        return (
            row is not None
            and row[0] == stat.size
            and row[1] == stat.version
            and row[2] == self._salt
        )

    def facts(self, stats: Iterable[FileStat]) -> dict[str, dict]:
        """Cached facts of the files whose size, version and salt are unchanged."""
        return {f.path: json.loads(self._rows[f.path][4]) for f in stats if self.fresh(f)}


def _use_wal(connection: sqlite3.Connection, patience_s: float = 30.0) -> None:
    """Put the database in WAL mode (kept in the file: once per new cache).

    Switching modes takes the whole database, and sqlite answers "database is locked" at
    once, without its busy timeout, while another process (a second rank starting on the
    same new cache) holds it: so wait and try again, as the timeout would.
    """
    deadline = time.monotonic() + patience_s
    while True:
        try:
            if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class FactsCache:
    """Facts of one source's files; ``salt`` names the inspector version and limits they used."""

    def __init__(self, connection: sqlite3.Connection, source: str, salt: str = ""):
        self._db = connection
        self.source = source
        self.salt = salt
        self._pending: list[tuple] = []

    @classmethod
    def open(cls, cache_dir: str | Path | None, source: str, salt: str = "") -> FactsCache:
        directory = Path(cache_dir) if cache_dir else default_cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(directory / "validation.sqlite", timeout=30)
        _use_wal(connection)
        # WAL with NORMAL sync stays consistent after a crash and may only lose the last
        # commits: fine for a cache, and it spares an fsync per commit (tens of milliseconds
        # on virtual disks, more than the whole duplicate search).
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.executescript(SCHEMA)
        return cls(connection, source, salt)

    def _rows(self) -> dict[str, tuple[int, str, str, str | None, str]]:
        rows = self._db.execute(
            "SELECT path, size, version, salt, sha256, facts FROM facts WHERE source = ?",
            (self.source,),
        )
        return {
            path: (size, version, salt, sha, facts)
            for path, size, version, salt, sha, facts in rows
        }

    def snapshot(self) -> FactsSnapshot:
        """This source's cached facts as they are now: one query for many lookups."""
        return FactsSnapshot(self._rows(), self.salt)

    def lookup(self, stats: Iterable[FileStat]) -> dict[str, dict]:
        """Cached facts of the files whose size, version and salt are unchanged."""
        return self.snapshot().facts(stats)

    def known_hashes(self, stats: Iterable[FileStat]) -> dict[str, str]:
        """Content hashes of unchanged files (any salt: the hash does not depend on limits)."""
        rows = self._rows()
        found = {}
        for f in stats:
            row = rows.get(f.path)
            if row is not None and row[0] == f.size and row[1] == f.version and row[3]:
                found[f.path] = row[3]
        return found

    def has_report(self) -> bool:
        """Whether this source was validated before (whatever its listing was then)."""
        query = "SELECT 1 FROM reports WHERE source = ?"
        return self._db.execute(query, (self.source,)).fetchone() is not None

    def report_for(self, listing: str) -> dict | None:
        """The last report of this source if its listing digest (files, versions, policy) matches."""
        row = self._db.execute(
            "SELECT listing, report FROM reports WHERE source = ?", (self.source,)
        ).fetchone()
        return json.loads(row[1]) if row and row[0] == listing else None

    def put_report(self, listing: str, report: dict) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO reports VALUES (?, ?, ?)",
                (self.source, listing, json.dumps(report)),
            )

    def put(self, stat: FileStat, facts: dict, encoded: str | None = None) -> None:
        """Store one file's facts (``encoded``: their JSON, when a worker already made it)."""
        self._pending.append(
            (
                self.source,
                stat.path,
                stat.size,
                stat.version,
                self.salt,
                facts.get("sha256"),
                encoded if encoded is not None else json.dumps(facts),
            )
        )
        if len(self._pending) >= 1000:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO facts VALUES (?, ?, ?, ?, ?, ?, ?)", self._pending
                )
            self._pending.clear()

    def close(self) -> None:
        self.flush()
        self._db.close()

    def __enter__(self) -> FactsCache:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
