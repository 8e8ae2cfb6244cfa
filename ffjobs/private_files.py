"""Files only their owner can read: a run directory holds the resolved config and the tracking
spool, both of which may carry credentials (a URL's password, ``slurm.env``).

Every path is created with its final mode (folders 0700, files 0600): never created readable
and narrowed afterwards, which would leave a moment in which another user could open it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from ffjobs.shared_inputs import temporary_sibling

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: str | Path) -> Path:
    """Create ``path`` (0700) and any missing parents (with the usual mode); an existing
    ``path`` is left as it is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
    return path


def write_private_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (a reader sees the old or the new file whole),
    as a file of mode 0600 whatever mode the file it replaces had."""
    path = Path(path)
    tmp = temporary_sibling(path)  # unique to this write
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    with os.fdopen(os.open(tmp, flags, PRIVATE_FILE_MODE), "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


def open_private_append(path: str | Path) -> IO[str]:
    """``path`` opened for appending text, created 0600 if it does not exist."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    return os.fdopen(os.open(path, flags, PRIVATE_FILE_MODE), "a", encoding="utf-8")
