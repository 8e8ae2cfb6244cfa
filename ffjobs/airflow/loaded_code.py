"""Whether a task runs the ffjobs that is on disk now.

A task forked below the scheduler's forkserver (:mod:`ffjobs.airflow.task_imports`) inherits
ffjobs as that process imported it, when the scheduler started: the files may have changed
since. :func:`source_digest` fingerprints the package's source files; the preload records it,
every task compares (:func:`stale_code`), and ``ffjobs airflow up`` restarts an embedded Airflow
whose scheduler started on other sources. Standard library only: a task calls it first.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
PRELOAD = "ffjobs.airflow.task_imports"


def source_digest(package: Path = PACKAGE) -> str:
    """SHA-256 over the package's ``.py`` files (path and content, in path order)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def stale_code() -> str | None:
    """What to tell when this process holds ffjobs as the scheduler's forkserver loaded it and
    the source has changed since; None otherwise (or when nothing was preloaded)."""
    preload = sys.modules.get(PRELOAD)
    if preload is None or source_digest() == preload.SOURCE_DIGEST:
        return None
    return (
        f"ffjobs in {PACKAGE} changed after this Airflow's scheduler loaded it for its tasks "
        "([scheduler] mp_forkserver_preload): restart the scheduler to run the new code "
        "(the embedded Airflow: `ffjobs airflow up` restarts it); this try ran nothing"
    )
