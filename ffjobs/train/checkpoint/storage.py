"""Where checkpoints live: a local (shared) directory or ``s3://bucket/prefix``.

Both stores give whole-object semantics: a reader sees either the complete old object or the
complete new one. Locally that takes a temporary file, fsync, rename and an fsync of the
directory; on S3 a PUT is already atomic. An ``s3://`` store uses the config's ``s3:`` section
(the same endpoint and region as an ``s3://`` dataset), else ``AWS_ENDPOINT_URL``.

A write the storage refuses (no space left, over quota, read-only, permission denied; S3
``AccessDenied``) raises :class:`StorageError`, one line naming the folder, the file and, on a
local disk, the free space; nothing of the refused file is left under its name (the temporary
file is removed), so the checkpoints before it stay as they were.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

from ffjobs.config.s3 import S3Config

STORAGE_ERRNOS = {
    errno.ENOSPC: "ENOSPC",
    errno.EDQUOT: "EDQUOT",
    errno.EROFS: "EROFS",
    errno.EACCES: "EACCES",
    errno.EPERM: "EPERM",
}
"""The OS errors that mean the storage refused: retrying the same write cannot help."""
S3_REFUSALS = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem"})
"""S3 error codes that mean the bucket refused (the credentials or the policy say no)."""


class StorageError(RuntimeError):
    """The checkpoint store refused a write; the message names the folder (or bucket), the
    file and, on a local disk, the free space. ``code``: the errno name or S3 error code."""

    def __init__(self, message: str, code: str = ""):
        super().__init__(message)
        self.code = code

    def __reduce__(self):  # raised in the checkpoint writer process, re-raised in the trainer
        return type(self), (str(self), self.code)


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def local_refusal(directory: Path, name: str, size: int, error: OSError) -> StorageError:
    """The :class:`StorageError` for ``error`` writing ``name`` (``size`` bytes) in ``directory``:
    what the OS said, and the free space where the folder can be asked."""
    code = STORAGE_ERRNOS.get(error.errno or 0, "")
    said = error.strerror or str(error)
    try:
        usage = shutil.disk_usage(directory)
        free = f"; {_size(usage.free)} free of {_size(usage.total)}"
    except OSError:
        free = ""
    return StorageError(
        f"checkpoint folder {directory}: {said} ({code}) writing {name} ({_size(size)}){free}",
        code,
    )


class CheckpointStore(Protocol):
    """A flat namespace of named byte blobs."""

    location: str

    def write(self, name: str, data: bytes | memoryview) -> None: ...
    def read(self, name: str) -> bytes: ...
    def size(self, name: str) -> int: ...
    def list(self) -> list[str]: ...
    def delete(self, name: str) -> None: ...
    def describe(self, name: str) -> str: ...


class LocalStore:
    """Files in one directory, written atomically."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.location = str(self.directory)

    def write(self, name: str, data: bytes | memoryview) -> None:
        try:
            self._write(name, data)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            size = data.nbytes if isinstance(data, memoryview) else len(data)
            raise local_refusal(self.directory, name, size, exc) from exc

    def _write(self, name: str, data: bytes | memoryview) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.directory / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        # the rename itself must reach the disk, or a crash can bring back the old name
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def read(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()

    def size(self, name: str) -> int:
        return (self.directory / name).stat().st_size

    def list(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.iterdir() if not p.name.startswith("."))

    def delete(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    def describe(self, name: str) -> str:
        return str(self.directory / name)


class S3Store:
    """Objects under ``s3://bucket/prefix`` via boto3, at the endpoint ``s3`` names.

    A pickled store is its URL and ``s3`` section: unpickled (in the checkpoint writer
    process) it opens a client of its own at the same endpoint.
    """

    def __init__(self, url: str, client: object | None = None, s3: S3Config | None = None):
        if not url.startswith("s3://"):
            raise ValueError(f"not an s3:// URL: {url}")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.location = url.rstrip("/")
        self.s3 = s3
        if client is None:
            import boto3

            client = boto3.client("s3", **(s3 or S3Config()).client_options())
        self.client = client

    def __getstate__(self) -> dict[str, object]:
        return {"url": self.location, "s3": self.s3}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["url"], s3=state["s3"])  # type: ignore[misc, arg-type]

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def write(self, name: str, data: bytes | memoryview) -> None:
        # botocore takes bytes or a file, not a buffer view (bytes(bytes) is the same object)
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=bytes(data))
        except Exception as exc:  # botocore's ClientError, without importing botocore here
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if code not in S3_REFUSALS:
                raise
            raise StorageError(
                f"checkpoint store {self.location}: access denied ({code}) writing {name} "
                f"({_size(len(data))}) to s3://{self.bucket}/{self._key(name)}",
                code,
            ) from exc

    def read(self, name: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()

    def size(self, name: str) -> int:
        return int(
            self.client.head_object(Bucket=self.bucket, Key=self._key(name))["ContentLength"]
        )

    def list(self) -> list[str]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        names: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                rest = item["Key"][len(prefix) :]
                if rest and "/" not in rest:
                    names.append(rest)
        return sorted(names)

    def delete(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    def describe(self, name: str) -> str:
        return f"{self.location}/{name}"


def open_store(location: str, s3: S3Config | None = None) -> CheckpointStore:
    """A store for a local directory or an ``s3://`` URL (at the endpoint ``s3`` names)."""
    if location.startswith("s3://"):
        return S3Store(location, s3=s3)
    return LocalStore(location)
