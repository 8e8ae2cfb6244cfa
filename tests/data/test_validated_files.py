"""What validation passed is what the training index accepts: the files it keeps, with their
sizes and versions; an index built against them refuses a dataset that differs, naming every
file added, removed or changed by its path relative to the root, before it reads one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ffjobs.config.data import ValidationConfig
from ffjobs.data.index import (
    DatasetChangedError,
    build_index,
    read_validated_files,
    write_validated_files,
)
from ffjobs.data.sources import LocalSource
from ffjobs.data.validate import validate_dataset
from ffjobs.errors import UserError


@pytest.fixture
def faces(clean_dataset: Path, tmp_path: Path) -> Path:
    """A copy of the clean dataset (24 identities of 8 images) this test may change."""
    return Path(shutil.copytree(clean_dataset, tmp_path / "faces"))


class CountingSource(LocalSource):
    """A local dataset that counts the files read from it."""

    reads = 0

    def read_bytes(self, path: str) -> bytes:
        CountingSource.reads += 1
        return super().read_bytes(path)


def validated(root: Path, tmp_path: Path, **config) -> Path:
    report = validate_dataset(
        root, ValidationConfig(cache_dir=str(tmp_path / "cache"), **config), keep_files=True
    )
    assert report.validated is not None
    return write_validated_files(report.validated, tmp_path / "validation" / "files.jsonl.gz")


def test_the_validated_files_are_what_the_index_keeps(corrupt_dataset, tmp_path):
    report = validate_dataset(
        corrupt_dataset, ValidationConfig(cache_dir=str(tmp_path)), keep_files=True
    )
    files = report.validated.files
    assert not set(files) & set(report.quarantine) and len(files) < report.files
    index = build_index(corrupt_dataset, quarantine=report.quarantine, cache_dir=tmp_path)
    assert sorted(files) == [r.path for r in index]
    assert {p: size for p, (size, _) in files.items()} == {r.path: r.size for r in index}

    path = write_validated_files(report.validated, tmp_path / "files.jsonl.gz")
    assert read_validated_files(path) == report.validated
    # an unchanged dataset is answered from the cached report: the same files, nothing read
    again = validate_dataset(
        corrupt_dataset, ValidationConfig(cache_dir=str(tmp_path)), keep_files=True
    )
    assert again.timing["report_cached"] and again.validated == report.validated
    assert (
        validate_dataset(corrupt_dataset, ValidationConfig(cache_dir=str(tmp_path))).validated
        is None
    )


def test_an_unchanged_dataset_is_indexed_as_validated(faces, tmp_path):
    files = validated(faces, tmp_path)
    index = build_index(faces, cache_dir=tmp_path / "cache", validated=files)
    assert len(index) == 192 and index.fingerprint == read_validated_files(files).fingerprint


def test_files_added_removed_or_changed_are_named_before_any_is_read(faces, tmp_path):
    files = validated(faces, tmp_path)
    for identity in ("id_0002", "id_0005"):
        (faces / identity / "01.jpg").unlink()  # 24 files of this dataset are named 01.jpg
    shutil.copy(faces / "id_0000" / "00.jpg", faces / "id_0003" / "08.jpg")
    changed = faces / "id_0007" / "03.jpg"
    changed.write_bytes(changed.read_bytes()[:-10])
    touched = faces / "id_0009" / "04.jpg"  # same bytes, a new modification time
    os.utime(touched, ns=(0, touched.stat().st_mtime_ns + 1_000_000_000))
    (faces / "id_0004" / "notes.txt").write_text("not an image: not the dataset's business")

    CountingSource.reads = 0
    with pytest.raises(DatasetChangedError) as caught:
        build_index(CountingSource(faces), cache_dir=tmp_path / "cache", validated=files)
    message = str(caught.value)
    assert CountingSource.reads == 0
    assert message.startswith(f"dataset {faces} changed since validation: ")
    assert "2 removed (id_0002/01.jpg, id_0005/01.jpg)" in message
    assert "1 added (id_0003/08.jpg)" in message
    assert "2 changed (id_0007/03.jpg, id_0009/04.jpg)" in message
    assert "notes.txt" not in message


def test_a_quarantined_file_may_go(corrupt_dataset, tmp_path):
    faces = Path(shutil.copytree(corrupt_dataset, tmp_path / "faces", symlinks=True))
    report = validate_dataset(faces, ValidationConfig(cache_dir=str(tmp_path)), keep_files=True)
    files = write_validated_files(report.validated, tmp_path / "files.jsonl.gz")
    gone = next(p for p in report.quarantine if (faces / p).is_file())
    (faces / gone).unlink()
    index = build_index(faces, quarantine=report.quarantine, cache_dir=tmp_path, validated=files)
    assert len(index) == len(report.validated.files)


def test_many_differences_are_counted_and_a_few_named(faces, tmp_path):
    files = validated(faces, tmp_path)
    shutil.rmtree(faces / "id_0011")
    with pytest.raises(DatasetChangedError, match=r"8 removed \(id_0011/00.jpg, .* and 3 more\)"):
        build_index(faces, cache_dir=tmp_path / "cache", validated=files)


def test_a_missing_or_cut_file_list_is_refused_by_name(faces, tmp_path):
    files = validated(faces, tmp_path)
    with pytest.raises(UserError, match="nowhere.jsonl.gz not found; validate"):
        build_index(faces, cache_dir=tmp_path / "cache", validated=tmp_path / "nowhere.jsonl.gz")
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(files.read_bytes()[:200])
    with pytest.raises(UserError, match="cut.jsonl.gz is (unreadable|incomplete)"):
        build_index(faces, cache_dir=tmp_path / "cache", validated=cut)


def test_a_missing_local_file_is_named_by_its_path_from_the_root(faces):
    source = LocalSource(faces)
    (faces / "id_0002" / "01.jpg").unlink()
    shutil.rmtree(faces / "id_0003")
    for path, named in [
        ("id_0002/01.jpg", "id_0002/01.jpg"),
        ("./id_0002/01.jpg", "id_0002/01.jpg"),
        ("id_0003/01.jpg", "id_0003/01.jpg"),  # its folder is gone too
    ]:
        with pytest.raises(FileNotFoundError) as caught:
            source.read_bytes(path)
        assert caught.value.filename == named
        assert str(caught.value) == f"[Errno 2] No such file or directory: '{named}'"
