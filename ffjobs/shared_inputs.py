"""Inputs that runs share, made once and atomically: the embedded default's synthetic dataset,
its pre-trained identity encoders and its local SQLite MLflow store.

Two runs started together in one folder both find such an input missing. :func:`make_once`
lets one of them make it and the other wait for it and use it:

* a lock while making: ``fcntl.flock`` on ``.<name>.lock`` beside the target (the kernel
  drops it when its holder dies, so a crashed maker never blocks the next);
* write aside: the maker writes a unique temporary name in the target's folder
  (``.<name>.<hex>.tmp``), then renames it into place, so the target is whole or absent;
* "complete" is the rename itself (a file) or a marker the maker writes last (a folder, see
  ``complete``): a half-made one (a crashed maker's temporary, a folder that is merely not
  empty) is never used; it is made again, with one line saying so.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def temporary_sibling(path: str | Path, kind: str = "tmp") -> Path:
    """A name unique to one write, in ``path``'s folder (so that a rename onto ``path`` is
    atomic): ``.<name>.<8 hex>.<kind>``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.{kind}")


def lock_file(target: str | Path) -> Path:
    """The lock of ``target``'s makers: ``.<name>.lock`` beside it (left in place: removing a
    lock file another process has open would give the next maker a lock of its own)."""
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def held_lock(
    target: str | Path, what: str, say: Callable[[str], None] = _stderr
) -> Iterator[None]:
    """Hold ``target``'s makers' lock (waiting for its holder, with one line saying so)."""
    path = lock_file(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process making {what} ({target})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor of this open file releases the lock


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def leftovers(target: str | Path) -> list[Path]:
    """What unfinished makings of ``target`` left beside it (temporaries and replaced ones)."""
    target = Path(target)
    if not target.parent.is_dir():
        return []
    prefix = f"{target.name}."  # after the leading dots: a temporary's own temporaries too
    return sorted(
        p
        for p in target.parent.iterdir()
        if p.name.startswith(".")
        and p.name.lstrip(".").startswith(prefix)
        and p.name.endswith((".tmp", ".old"))
    )


def make_once(
    target: str | Path,
    make: Callable[[Path], object],
    *,
    what: str,
    complete: Callable[[Path], bool] = os.path.exists,
    say: Callable[[str], None] = _stderr,
) -> bool:
    """Make ``target`` with ``make`` unless it is complete; True if this call made it.

    ``make(path)`` writes the input (a file or a folder) at ``path``, a temporary name beside
    ``target``; once ``complete(path)`` holds, it is renamed onto ``target``. ``complete``
    defaults to "exists" (the rename defines it); a folder whose maker writes a marker last
    passes a check for the marker. Another process making ``target`` meanwhile is waited for,
    and its result used. A ``target`` that is there but not complete is made again (one line
    says so), and a complete one is never replaced.
    """
    target = Path(target)
    if complete(target):
        return False
    with held_lock(target, what, say):
        if complete(target):  # the maker we waited for made it
            return False
        left = leftovers(target)
        if left or os.path.lexists(target):
            found = [*left, *([target] if os.path.lexists(target) else [])]
            say(
                f"{what}: {target} was not finished by its maker "
                f"({', '.join(p.name for p in found)}); not used, making it again"
            )
        for path in left:  # nobody makes them now: this process holds the lock
            _remove(path)
        temporary = temporary_sibling(target)
        replaced = None
        try:
            make(temporary)
            if not complete(temporary):
                raise RuntimeError(f"making {what} at {temporary} did not complete it")
            if os.path.lexists(target):
                replaced = temporary_sibling(target, "old")
                os.rename(target, replaced)
            os.rename(temporary, target)
        finally:
            for path in (temporary, replaced):
                if path is not None and os.path.lexists(path):
                    _remove(path)
    return True
