"""Where dataset files live: a local directory or ``s3://bucket/prefix``, behind one small interface.

Paths handed to a source are always POSIX paths relative to its root. A path that would leave
the root (``..``, an absolute path, a symlink pointing outside) raises :class:`PathEscapeError`
before anything outside the root is opened.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Iterator
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import Any, NamedTuple, Protocol

from ffjobs.errors import UserError

_HAS_DIR_FD = os.open in os.supports_dir_fd
_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK: opening a FIFO must not wait for a writer (no effect on regular files).
_READ_FILE = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})


class PathEscapeError(ValueError):
    """A dataset path resolves outside the dataset root."""


class SourceError(UserError):
    """The dataset source cannot be reached or listed."""


class FileStat(NamedTuple):
    """One file as listed: its relative path, size and a version stamp (mtime_ns or ETag).

    ``escapes_root``: a symlink that points outside the dataset root, listed so it can be
    reported, never read. A tuple, not a dataclass: listings hold one per file, and an
    unchanged dataset is re-validated in about the time it takes to list it.
    """

    path: str
    size: int
    version: str
    escapes_root: bool = False


class Source(Protocol):
    """A dataset root that can list, stat and read files by relative path."""

    uri: str
    read_threads: int
    """Reads worth keeping in flight at once per worker: 1 for local disks, more for a remote
    store where each read waits a round trip."""

    def list(self) -> Iterator[FileStat]:
        """Every file under the root, recursively, in a stable order; symlinks that leave the
        root are listed with ``escapes_root=True`` and nothing else about them is read."""
        ...

    def stat(self, path: str) -> FileStat:
        """Size and version of one file; ``FileNotFoundError`` if absent."""
        ...

    def read_bytes(self, path: str) -> bytes:
        """The whole content of one file."""
        ...


def normalize_relative(path: str) -> str:
    """Normalise a dataset-relative path, rejecting absolute paths and ``..`` that leave the root."""
    if not path or path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise PathEscapeError(f"{path!r} is absolute; dataset paths must be relative to the root")
    normal = posixpath.normpath(path.replace("\\", "/"))
    if normal == ".." or normal.startswith("../"):
        raise PathEscapeError(f"{path!r} leaves the dataset root")
    return normal


def _require_regular(st: os.stat_result, path: str) -> None:
    """Raise ``OSError`` (``IsADirectoryError`` for a directory) unless ``st`` is a regular file."""
    if not S_ISREG(st.st_mode):
        code = errno.EISDIR if S_ISDIR(st.st_mode) else errno.EINVAL
        raise OSError(code, "not a regular file", path)


class LocalSource:
    """A dataset in a local (or network-mounted) directory."""

    read_threads = 1

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = str(self.root)
        if not self.root.is_dir():
            raise SourceError(f"dataset root {root} is not a directory; check data.source")
        if not is_text_path(self.uri):  # reports and the cache name the source by its path
            raise SourceError(f"dataset root {shown_path(self.uri)} is not valid UTF-8; rename it")

    def _inside(self, target: Path) -> bool:
        return target == self.root or self.root in target.parents

    def resolve(self, path: str) -> Path:
        """The real path of a relative dataset path, refusing anything outside the root."""
        # realpath reads link names only, never the target's content.
        real = Path(os.path.realpath(self.root / normalize_relative(path)))
        if not self._inside(real):
            raise PathEscapeError(f"{path!r} resolves to {real}, outside the dataset root")
        return real

    def list(self) -> Iterator[FileStat]:
        """Regular files only, whatever their names say: a directory is descended into like
        any folder (``id_0001/folder.jpg/`` is a nested folder of identity ``id_0001``), a
        symlink inside the root is listed only when it points at a regular file, and FIFOs,
        sockets, devices, dangling links and links to directories are skipped. A name that is
        not UTF-8 is listed as ``os.listdir`` decodes it (surrogate escapes, see
        :func:`is_text_path`); the layout reports it and nothing reads it."""
        # One lstat per name relative to its open folder: cheaper than DirEntry.stat on a
        # full path, and re-validating an unchanged dataset costs about this listing.
        folders = [""]
        while folders:
            folder = folders.pop()
            prefix = f"{folder}/" if folder else ""
            for name, st in self._folder(folder):
                rel = prefix + name
                if S_ISREG(st.st_mode):
                    yield FileStat(rel, st.st_size, str(st.st_mtime_ns))
                elif S_ISDIR(st.st_mode):
                    folders.append(rel)
                elif S_ISLNK(st.st_mode):
                    try:
                        real = self.resolve(rel)
                    except PathEscapeError:
                        yield FileStat(rel, 0, "", escapes_root=True)
                        continue
                    if real.is_file():  # links to directories are not followed (cycles)
                        target = real.stat()
                        yield FileStat(rel, target.st_size, str(target.st_mtime_ns))

    def _folder(self, folder: str) -> list[tuple[str, os.stat_result]]:
        """``(name, lstat)`` of every entry of one folder, sorted by name."""
        directory = os.open(f"{self.uri}/{folder}", _DIR_NOFOLLOW)
        try:
            return [
                (name, os.stat(name, dir_fd=directory, follow_symlinks=False))
                for name in sorted(os.listdir(directory))
            ]
        finally:
            os.close(directory)

    def stat(self, path: str) -> FileStat:
        """Size and version of one regular file; a directory or FIFO raises ``OSError``."""
        st = self.resolve(path).stat()
        _require_regular(st, path)
        return FileStat(normalize_relative(path), st.st_size, str(st.st_mtime_ns))

    def read_bytes(self, path: str) -> bytes:
        """The content of one regular file; anything else (a directory, a FIFO) raises
        ``OSError`` at once instead of failing late or blocking on a pipe with no writer.
        A file that is not there raises ``FileNotFoundError`` naming its path relative to the
        root (``id_0002/01.jpg``), whichever part of it is missing."""
        relative = normalize_relative(path)
        try:
            fd = self._open(relative)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), relative) from None
        try:
            _require_regular(os.fstat(fd), path)
        except OSError:
            os.close(fd)
            raise
        with open(fd, "rb", buffering=0) as handle:  # unbuffered: one read of the whole file
            return handle.readall()

    def _open(self, relative: str) -> int:
        """A read-only descriptor of one file, symlinks allowed only inside the root."""
        try:
            return self._open_without_links(relative)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOSYS):
                raise
            # A symlink on the way: allowed only if it stays inside the root.
            return os.open(self.resolve(relative), _READ_FILE)

    def _open_without_links(self, relative: str) -> int:
        """Open component by component, refusing every symlink (ELOOP): no realpath per file,
        and nothing can swap a directory for a link between the check and the open."""
        if not _HAS_DIR_FD:
            raise OSError(errno.ENOSYS, "no dir_fd support")
        *folders, name = relative.split("/")
        directory = os.open(self.uri, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for folder in folders:
                inner = os.open(folder, _DIR_NOFOLLOW, dir_fd=directory)
                os.close(directory)
                directory = inner
            return os.open(name, _READ_FILE | os.O_NOFOLLOW, dir_fd=directory)
        finally:
            os.close(directory)

    def __repr__(self) -> str:
        return f"LocalSource({self.uri!r})"


class S3Source:
    """A dataset under ``s3://bucket/prefix`` read through boto3 (AWS, MinIO, Ceph).

    Credentials, region and endpoint come from the usual AWS environment and profile
    (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_PROFILE``...) unless given explicitly.
    The client is created lazily per process, so a source can be pickled into workers, and a
    forked worker never reuses the parent's client (boto3 clients and their pooled
    connections are not safe to share across processes).
    """

    read_threads = 8

    def __init__(self, uri: str, endpoint_url: str | None = None, region: str | None = None):
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        if not bucket:
            raise SourceError(f"{uri!r} has no bucket; expected s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.uri = f"s3://{bucket}/{self.prefix}"
        self.endpoint_url = endpoint_url
        self.region = region
        self._client: Any = None
        self._client_pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_client_pid": None}

    @property
    def client(self) -> Any:
        if self._client is None or self._client_pid != os.getpid():
            import boto3  # lazily: ffjobs imports without boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                config=Config(max_pool_connections=self.read_threads),
            )
            self._client_pid = os.getpid()
        return self._client

    def _errors(self) -> tuple[type[BaseException], ...]:
        import botocore.exceptions

        return (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)

    def list(self) -> Iterator[FileStat]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.prefix) :]
                    if rel and not rel.endswith("/"):
                        yield FileStat(rel, int(obj["Size"]), obj["ETag"].strip('"'))
        except self._errors() as exc:
            raise SourceError(
                f"cannot list {self.uri}: {exc}; check credentials, "
                f"s3.endpoint_url and the bucket name"
            ) from None

    def _key(self, path: str) -> str:
        return self.prefix + normalize_relative(path)

    def stat(self, path: str) -> FileStat:
        import botocore.exceptions

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(path))
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.uri}{path}") from None
            raise
        return FileStat(
            normalize_relative(path), int(head["ContentLength"]), head["ETag"].strip('"')
        )

    def read_bytes(self, path: str) -> bytes:
        import botocore.exceptions

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(path))["Body"].read()
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.uri}{path}") from None
            raise OSError(f"cannot read {self.uri}{path}: {exc}") from None

    def __repr__(self) -> str:
        return f"S3Source({self.uri!r})"


def open_source(
    uri: str | Path | Source, endpoint_url: str | None = None, region: str | None = None
) -> Source:
    """A :class:`Source` for a local path or ``s3://bucket/prefix`` (sources pass through)."""
    if not isinstance(uri, str | Path):
        return uri
    text = str(uri)
    if text.startswith("s3://"):
        return S3Source(text, endpoint_url=endpoint_url, region=region)
    if "://" in text:
        raise SourceError(
            f"unsupported dataset URI {text!r}; use a local path or s3://bucket/prefix"
        )
    return LocalSource(text)


def file_name(source: Source, path: str) -> str:
    """How messages name one dataset file: its path relative to the root (``id_0002/01.jpg``)
    for a local dataset, its key as an ``s3://`` address for S3 (as a missing object is named)."""
    return f"{source.uri}{path}" if source.uri.startswith("s3://") else path


def is_image_path(path: str) -> bool:
    """Whether a path has an image file extension (listing filters on it).

    ``posixpath.splitext``'s rule (a leading dot starts no extension) without its cost.
    """
    dot = path.rfind(".")
    return dot > path.rfind("/") + 1 and path[dot:].lower() in IMAGE_EXTENSIONS


def is_text_path(path: str) -> bool:
    """Whether a listed path is valid UTF-8 text.

    A file name that is not UTF-8 comes back from ``os.listdir`` with surrogate escapes
    (``\\udcff`` for the byte ``0xff``), which no report, manifest or cache can hold.
    """
    if path.isascii():  # nearly every path: no encoding needed to know
        return True
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def path_bytes(path: str) -> bytes:
    """A path's bytes as the filesystem holds them (surrogate escapes back to their bytes)."""
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte: not from a listing
        return path.encode("utf-8", "surrogatepass")


def shown_path(path: str) -> str:
    """A path as printable UTF-8: bytes that are not UTF-8 as escapes (``id_0001/\\xff.jpg``)."""
    if is_text_path(path):
        return path
    return path_bytes(path).decode("utf-8", "backslashreplace")
