"""What a dataset contains: images, their identities and splits, and a fingerprint naming its version.

Three layouts map files to identities: identity folders (``root/<identity>/*.jpg``, VGGFace2
style), flat folders (each image its own identity, FFHQ style) and a manifest (JSONL or CSV with
``path``, ``identity`` and an optional ``split``). :func:`scan` lists a dataset as entries
(validation uses it, problems included); :func:`build_index` turns it into the records training
reads, without quarantined or unreadable files.

What validation passed is kept as :class:`ValidatedFiles` (each file training will read, with
its size and version: mtime or ETag); :func:`build_index` given them refuses a dataset that
differs, naming the files added, removed or changed, before it reads any of them.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import posixpath
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from ffjobs.config.s3 import S3Config
from ffjobs.data.sources import (
    FileStat,
    PathEscapeError,
    Source,
    file_name,
    is_image_path,
    is_text_path,
    normalize_relative,
    open_source,
    shown_path,
)
from ffjobs.errors import UserError

if TYPE_CHECKING:
    from ffjobs.config.data import DataConfig

Layout = Literal["auto", "identity_folders", "flat", "manifest"]
MANIFEST_NAMES = ("manifest.jsonl", "manifest.csv")
SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "test": "test",
}


class ManifestError(UserError):
    """A manifest row is malformed."""


class ScanEntry(NamedTuple):
    """One dataset file as the layout sees it; ``problem`` set when it must not be read.

    ``path`` and ``identity`` are always printable UTF-8: a name that is not UTF-8 is shown
    with escapes (:func:`~ffjobs.data.sources.shown_path`) and marked ``undecodable_name``.
    """

    path: str
    identity: str
    split: str | None
    stat: FileStat | None
    problem: Literal["path_escape", "missing_file", "undecodable_name"] | None = None


@dataclass(frozen=True)
class Record:
    """One training image: where it is, whose face it is, which split, and its content hash."""

    path: str
    identity: str
    split: str | None
    size: int
    sha256: str


@dataclass
class DatasetIndex(Sequence[Record]):
    """The images training reads, in a stable order, and the fingerprint naming this version."""

    source: Source
    layout: str
    records: list[Record] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):  # type: ignore[override]
        return self.records[i]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    @property
    def identities(self) -> list[str]:
        return sorted({r.identity for r in self.records})

    @property
    def fingerprint(self) -> str:
        return dataset_fingerprint(self.records)

    def subset(self, records: Iterable[Record]) -> DatasetIndex:
        return DatasetIndex(self.source, self.layout, list(records))


def dataset_fingerprint(records: Iterable[Record]) -> str:
    """Hash of the manifest content (paths, identities, splits, sizes, content hashes), 16 hex."""
    encode = json.JSONEncoder().encode
    rows = "".join(
        encode([r.path, r.identity, r.split, r.size, r.sha256]) + "\n"
        for r in sorted(records, key=lambda r: r.path)
    )
    return hashlib.sha256(rows.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- scanning


def detect_layout(listing: Sequence[FileStat], manifest: str | None) -> str:
    """``manifest`` if one is given or lies at the root, else identity folders if images sit in
    sub-folders, else flat."""
    if manifest:
        return "manifest"
    names = {f.path for f in listing}
    if any(name in names for name in MANIFEST_NAMES):
        return "manifest"
    if any("/" in f.path for f in listing if is_image_path(f.path)):
        return "identity_folders"
    return "flat"


def _manifest_name(listing: Sequence[FileStat], manifest: str | None) -> str:
    if manifest:
        return manifest
    names = {f.path for f in listing}
    return next(name for name in MANIFEST_NAMES if name in names)


def _read_manifest_text(source: Source, manifest: str) -> str:
    local = Path(manifest)
    try:
        if local.is_absolute() and local.is_file():
            return local.read_text(encoding="utf-8")
        return source.read_bytes(manifest).decode("utf-8")
    except FileNotFoundError:
        raise ManifestError(
            f"manifest {manifest} not found in {source.uri}; check "
            f"data.manifest (relative to data.source)"
        ) from None
    except (UnicodeDecodeError, PathEscapeError) as exc:
        raise ManifestError(f"manifest {manifest}: {exc}") from None
    except OSError as exc:  # a directory, a FIFO, no permission
        raise ManifestError(f"manifest {manifest}: cannot read it: {exc.strerror or exc}") from None


def read_manifest(text: str, name: str) -> Iterator[tuple[int, str, str, str | None]]:
    """``(line, path, identity, split)`` rows of a JSONL or CSV manifest."""
    if name.endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        missing = {"path", "identity"} - set(reader.fieldnames or ())
        if missing:
            raise ManifestError(
                f"{name}:1: CSV header lacks {', '.join(sorted(missing))}; "
                f"expected path,identity[,split]"
            )
        for line, row in enumerate(reader, start=2):
            yield line, row["path"], row["identity"], (row.get("split") or None)
        return
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
            yield line, str(row["path"]), str(row["identity"]), row.get("split")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ManifestError(
                f"{name}:{line}: expected a JSON object with path and identity ({exc})"
            ) from None


def _split(value: str | None, name: str, line: int) -> str | None:
    if value is None or value == "":
        return None
    split = SPLIT_ALIASES.get(str(value).lower())
    if split is None:
        raise ManifestError(f"{name}:{line}: split {value!r} is not one of train, val, test")
    return split


def scan(
    source: Source, layout: Layout = "auto", manifest: str | None = None
) -> tuple[str, list[ScanEntry]]:
    """List a dataset under its layout: ``(resolved layout, entries)`` with problems marked."""
    return layout_entries(source, list(source.list()), layout, manifest)


def manifest_version(source: Source, manifest: str | None) -> str:
    """Content hash of an explicitly given manifest ("" without one).

    A manifest inside the dataset is in its listing already (size and version); one given by
    a local absolute path is not, so what a cached report depends on includes its content.
    """
    if manifest is None:
        return ""
    return hashlib.sha256(_read_manifest_text(source, manifest).encode()).hexdigest()


def layout_entries(
    source: Source, listing: Sequence[FileStat], layout: Layout, manifest: str | None
) -> tuple[str, list[ScanEntry]]:
    """A listing seen through its layout: ``(resolved layout, entries)`` with problems marked.

    An image whose name is not UTF-8 is an ``undecodable_name`` entry, shown with escapes
    and never read (nothing downstream could name it); other names are kept as listed.
    """
    resolved = layout if layout != "auto" else detect_layout(listing, manifest)
    if resolved != "manifest":
        folders = resolved == "identity_folders"
        entries = []
        for f in listing:
            path = f.path
            if not is_image_path(path):
                continue
            text = is_text_path(path)
            if not text:
                path = shown_path(path)
            if folders:
                identity, slash, _ = path.partition("/")
                if not slash:
                    continue  # files beside the identity folders (READMEs, previews)
            else:
                identity = posixpath.splitext(path)[0]
            if f.escapes_root:
                entries.append(ScanEntry(path, identity, None, None, "path_escape"))
            elif not text:
                entries.append(ScanEntry(path, identity, None, None, "undecodable_name"))
            else:
                entries.append(ScanEntry(path, identity, None, f))
        return resolved, entries
    name = _manifest_name(listing, manifest)
    by_path = {f.path: f for f in listing}
    entries = []
    for line, path, identity, split in read_manifest(_read_manifest_text(source, name), name):
        split = _split(split, name, line)
        identity = shown_path(identity)  # a JSON manifest can spell lone surrogates
        try:
            normal = normalize_relative(path)
        except PathEscapeError:
            entries.append(ScanEntry(shown_path(path), identity, split, None, "path_escape"))
            continue
        stat = by_path.get(normal)
        if not is_text_path(normal):
            entries.append(ScanEntry(shown_path(normal), identity, split, None, "undecodable_name"))
        elif stat is None:
            entries.append(ScanEntry(normal, identity, split, None, "missing_file"))
        elif stat.escapes_root:
            entries.append(ScanEntry(normal, identity, split, None, "path_escape"))
        else:
            entries.append(ScanEntry(normal, identity, split, stat))
    return resolved, entries


# --------------------------------------------------------------------------- validated files


class DatasetChangedError(ValueError):
    """The dataset differs from what validation passed (files added, removed or changed)."""


@dataclass(frozen=True)
class ValidatedFiles:
    """The files validation passed for training (its layout's images minus the quarantine),
    each with the size and version (mtime or ETag) it had, and the validated fingerprint."""

    source: str
    fingerprint: str
    files: Mapping[str, tuple[int, str]]
    """``{path: (size, version)}``."""


def validated_files(
    source: str, fingerprint: str, entries: Iterable[ScanEntry], quarantine: Iterable[str]
) -> ValidatedFiles:
    """What training may read of a validated listing: what :func:`build_index` keeps of it."""
    excluded = set(quarantine)
    files = {
        e.path: (e.stat.size, e.stat.version)
        for e in entries
        if e.problem is None and e.stat is not None and e.path not in excluded
    }
    return ValidatedFiles(source, fingerprint, files)


def write_validated_files(validated: ValidatedFiles, path: str | Path) -> Path:
    """Gzipped JSON lines: a header (source, fingerprint, count), then ``[path, size, version]``
    per file, sorted by path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    encode = json.JSONEncoder(ensure_ascii=False).encode
    header = {
        "source": validated.source,
        "fingerprint": validated.fingerprint,
        "files": len(validated.files),
    }
    partial = path.with_name(path.name + ".partial")
    with gzip.open(partial, "wt", encoding="utf-8", compresslevel=6) as out:
        out.write(encode(header) + "\n")
        for name in sorted(validated.files):
            size, version = validated.files[name]
            out.write(encode([name, size, version]) + "\n")
    partial.replace(path)
    return path


def read_validated_files(path: str | Path) -> ValidatedFiles:
    """The list :func:`write_validated_files` wrote."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            header = json.loads(next(lines))
            files = {name: (size, version) for name, size, version in map(json.loads, lines)}
    except FileNotFoundError:
        raise UserError(
            f"validated file list {path} not found; validate the dataset again"
        ) from None
    except (OSError, EOFError, StopIteration, ValueError, TypeError, KeyError) as exc:
        raise UserError(
            f"validated file list {path} is unreadable ({exc}); validate again"
        ) from None
    if len(files) != header.get("files"):
        raise UserError(f"validated file list {path} is incomplete; validate the dataset again")
    return ValidatedFiles(str(header["source"]), str(header["fingerprint"]), files)


def check_unchanged(
    source: Source, listed: Mapping[str, tuple[int, str]], validated: ValidatedFiles
) -> None:
    """Raise :class:`DatasetChangedError` unless ``listed`` (``{path: (size, version)}`` of
    the files training would read) is what validation passed, naming the differences (paths
    relative to the root; ``s3://`` keys for S3). Nothing is read: sizes and versions only."""
    added = sorted(listed.keys() - validated.files.keys())
    removed = sorted(validated.files.keys() - listed.keys())
    changed = sorted(
        p for p in listed.keys() & validated.files.keys() if listed[p] != validated.files[p]
    )
    if not (added or removed or changed):
        return
    parts = []
    for what, paths in (("removed", removed), ("added", added), ("changed", changed)):
        if paths:
            parts.append(f"{len(paths)} {what} ({_some(source, paths)})")
    raise DatasetChangedError(
        f"dataset {source.uri} changed since validation: {', '.join(parts)}; training "
        f"refused before its first step (validated fingerprint {validated.fingerprint}): "
        "restore the files and resume the run (validation checks them again), or start a new "
        "run on the dataset as it is now"
    )


def _some(source: Source, paths: Sequence[str], shown: int = 5) -> str:
    """Up to ``shown`` names, then how many more."""
    names = ", ".join(file_name(source, p) for p in paths[:shown])
    return names + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


# --------------------------------------------------------------------------- index


def read_quarantine(path: str | Path | None) -> set[str]:
    """Paths listed in a quarantine file (one per line, ``#`` comments)."""
    if path is None:
        return set()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError(f"quarantine file {path} not found; run `ffjobs validate` again") from None
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def content_hashes(
    source: Source, stats: Iterable[FileStat], cache_dir: str | Path | None = None
) -> dict[str, str]:
    """SHA-256 of each file: from the validation cache when unchanged, else by reading it."""
    from ffjobs.data.cache import FactsCache

    stats = list(stats)
    with FactsCache.open(cache_dir, source.uri) as cache:
        hashes = cache.known_hashes(stats)
    for f in stats:
        if f.path not in hashes:
            hashes[f.path] = hashlib.sha256(source.read_bytes(f.path)).hexdigest()
    return hashes


def build_index(
    source: str | Path | Source,
    layout: Layout = "auto",
    manifest: str | None = None,
    quarantine: str | Path | Iterable[str] | None = None,
    cache_dir: str | Path | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    validated: ValidatedFiles | str | Path | None = None,
) -> DatasetIndex:
    """The training index of a dataset: readable images minus the quarantine list, sorted by path.

    ``quarantine`` is a file written by ``ffjobs validate`` or an iterable of paths. Entries
    the layout marks (escaping links, missing files, names that are not UTF-8) are never in
    it, whatever their configured severity. With ``validated`` (or the file it was written
    to), a dataset whose files differ from them raises :class:`DatasetChangedError` before any
    file is read.
    """
    src = open_source(source, endpoint_url=endpoint_url, region=region)
    excluded = (
        read_quarantine(quarantine) if isinstance(quarantine, str | Path) else set(quarantine or ())
    )
    if isinstance(validated, str | Path):
        validated = read_validated_files(validated)
    resolved, entries = scan(src, layout, manifest)
    kept = [e for e in entries if e.problem is None and e.path not in excluded]
    if validated is not None:
        listed = {e.path: (e.stat.size, e.stat.version) for e in kept if e.stat is not None}
        check_unchanged(src, listed, validated)
    hashes = content_hashes(src, (e.stat for e in kept if e.stat is not None), cache_dir)
    records = [
        Record(e.path, e.identity, e.split, e.stat.size, hashes[e.path])
        for e in kept
        if e.stat is not None
    ]
    records.sort(key=lambda r: r.path)
    return DatasetIndex(src, resolved, records)


def index_from_config(
    data: DataConfig,
    quarantine: str | Path | None = None,
    s3: S3Config | None = None,
    validated: str | Path | None = None,
) -> DatasetIndex:
    """:func:`build_index` with the dataset settings (and the ``s3:`` section) of a config."""
    s3 = s3 or S3Config()
    return build_index(
        data.source,
        layout=data.layout,
        manifest=data.manifest,
        quarantine=quarantine,
        cache_dir=data.validation.cache_dir,
        endpoint_url=s3.endpoint_url,
        region=s3.region,
        validated=validated,
    )


def split_identities(
    index: DatasetIndex,
    val_fraction: float,
    seed: int,
) -> tuple[DatasetIndex, DatasetIndex]:
    """``(train, val)`` split BY IDENTITY, so no face appears on both sides.

    A manifest's split column wins (rows without one train); otherwise a seeded shuffle of
    the identities holds out ``val_fraction`` of them (at least one when the fraction is > 0).
    """
    if any(r.split is not None for r in index):
        train = [r for r in index if r.split in (None, "train")]
        val = [r for r in index if r.split in ("val", "test")]
        return index.subset(train), index.subset(val)
    identities = index.identities
    random.Random(seed).shuffle(identities)
    n_val = round(len(identities) * val_fraction)
    if val_fraction > 0 and len(identities) >= 2:
        n_val = min(max(n_val, 1), len(identities) - 1)
    held_out = set(identities[:n_val])
    train = [replace(r, split="train") for r in index if r.identity not in held_out]
    val = [replace(r, split="val") for r in index if r.identity in held_out]
    return index.subset(train), index.subset(val)
