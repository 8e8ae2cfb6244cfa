"""HMAC-SHA256 signatures for what a run keeps in its checkpoint store and can only keep as code.

The compile cache (Inductor's graphs and kernels, Dynamo's region captures) is generated code
and pickles by nature: no format makes it safe to load from a folder or bucket that someone
else could write. So each such file is signed under a per-run secret key, and its signature is
checked before a single byte of it is deserialised; a file that is unsigned, altered or signed
under another key is refused. The key never enters the checkpoint store: it lives in the run
directory (``<run dir>/signing.key``, mode 0600), or for a job started without a run in the
user's own state folder, and the ranks receive its path in the job, never the key itself.

A signed file is ``MAGIC``, the hex HMAC of its name and payload, a newline, then the payload;
the name is signed too, so one signed file cannot stand in for another (the blob for a
device's captures, one device's captures for another's).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

MAGIC = b"ffjobs-signed-v1\n"
KEY_FILE = "signing.key"
"""The run's key, in its run directory."""
_DIGEST_HEX = 64


class SignatureError(ValueError):
    """A stored file is not signed, or not by this run's key."""


def run_key_file(run_dir: str | Path) -> Path:
    """Where the run in ``run_dir`` keeps its signing key."""
    return Path(run_dir) / KEY_FILE


def user_key_file(checkpoint_dir: str) -> Path:
    """The key of a job started without a run (``ffjobs bench train``, a bare ``TrainJob``):
    one per checkpoint location, in the user's state folder (``$XDG_STATE_HOME``, by default
    ``~/.local/state``), which no other user can read."""
    location = checkpoint_dir if "://" in checkpoint_dir else str(Path(checkpoint_dir).resolve())
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    digest = hashlib.sha256(location.encode()).hexdigest()[:24]
    return Path(state) / "ffjobs" / "signing-keys" / f"{digest}.key"


def load_or_create_key(path: str | Path) -> bytes:
    """The key in ``path``, created there first (mode 0600) if it does not exist yet.

    Ranks and processes may call it at once: the key is written to a private temporary file
    and linked into place, which fails if another got there first, so all read one key.
    """
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: its key is the run's
        finally:
            tmp.unlink(missing_ok=True)
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise SignatureError(f"signing key {path} is not a key of 32 hex-encoded bytes")
    return key


def _tag(key: bytes, name: str, payload: bytes | memoryview) -> bytes:
    mac = hmac.new(key, name.encode() + b"\0", hashlib.sha256)
    mac.update(payload)
    return mac.hexdigest().encode()


def sign(key: bytes, name: str, payload: bytes) -> bytes:
    """``payload`` as the signed file ``name``."""
    return MAGIC + _tag(key, name, payload) + b"\n" + payload


def verified_payload(key: bytes, name: str, data: bytes) -> bytes:
    """The payload of the signed file ``name`` read as ``data``; raises :class:`SignatureError`
    (one line) unless it is signed under ``key`` as ``name``. Nothing in ``data`` is
    interpreted before the signature is checked."""
    head = len(MAGIC) + _DIGEST_HEX + 1
    if not data.startswith(MAGIC) or len(data) < head or data[head - 1 : head] != b"\n":
        raise SignatureError("not signed (no ffjobs signature at its start)")
    payload = memoryview(data)[head:]
    if not hmac.compare_digest(data[len(MAGIC) : head - 1], _tag(key, name, payload)):
        raise SignatureError("its signature does not match this run's key (altered, or foreign)")
    return bytes(payload)
