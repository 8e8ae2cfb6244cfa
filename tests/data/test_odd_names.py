"""Odd names and odd entries: file names that are not UTF-8, directories, FIFOs and links
named like images. Validation reports them (or skips what is not a file) and never crashes."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from ffjobs.cli import main
from ffjobs.config.data import ValidationConfig
from ffjobs.data.index import build_index
from ffjobs.data.sources import LocalSource, SourceError, shown_path
from ffjobs.data.validate import validate_dataset

RAW_NAME = b"id_0001/\xff\xfe.jpg"
SHOWN = "id_0001/\\xff\\xfe.jpg"  # the escapes as text: a backslash, x, f, f...


def small_copy(clean_dataset: Path, root: Path) -> Path:
    """Four identities of four images each: 16 good files."""
    for folder in sorted(clean_dataset.iterdir())[:4]:
        (root / folder.name).mkdir(parents=True)
        for image in sorted(folder.iterdir())[:4]:
            shutil.copy(image, root / folder.name / image.name)
    return root


@pytest.fixture
def undecodable(clean_dataset: Path, tmp_path: Path) -> Path:
    """16 good files and one whose name is not UTF-8 (its content is a good image)."""
    root = small_copy(clean_dataset, tmp_path / "faces")
    try:
        with open(os.path.join(os.fsencode(root), RAW_NAME), "wb") as handle:
            handle.write((root / "id_0001" / "00.jpg").read_bytes())
    except OSError:
        pytest.skip("this filesystem refuses file names that are not UTF-8")
    return root


@pytest.fixture
def odd_entries(clean_dataset: Path, tmp_path: Path) -> Path:
    """16 good files plus a directory, a FIFO and links whose names end in ``.jpg``."""
    root = small_copy(clean_dataset, tmp_path / "faces")
    folder = root / "id_0001" / "folder.jpg"
    folder.mkdir()
    shutil.copy(root / "id_0002" / "00.jpg", folder / "inner.jpg")
    os.mkfifo(root / "id_0001" / "pipe.jpg")
    os.symlink("nowhere.jpg", root / "id_0001" / "dangling.jpg")
    os.symlink("../id_0002", root / "id_0001" / "linked_folder.jpg")
    return root


def test_shown_path_escapes_the_bytes_that_are_not_utf8():
    assert shown_path(os.fsdecode(RAW_NAME)) == SHOWN
    assert shown_path(os.fsdecode("é/x\xff.jpg".encode("latin-1"))) == "\\xe9/x\\xff.jpg"
    assert shown_path("id_0001/é.jpg") == "id_0001/é.jpg"


def test_undecodable_name_is_an_error_finding_and_never_read(undecodable, tmp_path, monkeypatch):
    read: list[str] = []
    real_read = LocalSource.read_bytes

    def spying_read(source, path):
        read.append(path)
        return real_read(source, path)

    monkeypatch.setattr(LocalSource, "read_bytes", spying_read)
    config = ValidationConfig(cache_dir=str(tmp_path / "cache"), workers=1)
    report = validate_dataset(undecodable, config)
    assert report.files == 17 and report.bad_files == 1
    found = report.checks["undecodable_name"]
    assert found["severity"] == "error" and found["count"] == 1 and found["examples"] == [SHOWN]
    assert report.quarantine == [SHOWN]
    assert report.count("exact_duplicate") == 0  # its content (a copy of 00.jpg) was not read
    assert len(read) == 16 and all(path.isascii() for path in read)
    assert not report.passed and report.failures[0].startswith("bad files: 1/17")
    json.dumps(report.to_dict(), ensure_ascii=False).encode("utf-8")  # no lone surrogates

    again = validate_dataset(undecodable, config)
    assert again.timing["report_cached"] and again.quarantine == [SHOWN]
    assert again.fingerprint == report.fingerprint


def test_undecodable_name_severity_can_be_overridden(undecodable, tmp_path):
    config = ValidationConfig(
        cache_dir=str(tmp_path / "cache"), severity={"undecodable_name": "warning"}
    )
    report = validate_dataset(undecodable, config)
    found = report.checks["undecodable_name"]
    assert found["severity"] == "warning" and found["count"] == 1
    assert report.passed and report.quarantine == [] and report.bad_files == 0


def test_undecodable_name_in_the_flat_layout(undecodable, tmp_path):
    report = validate_dataset(
        undecodable / "id_0001", ValidationConfig(cache_dir=str(tmp_path / "cache"))
    )
    assert report.layout == "flat" and report.quarantine == ["\\xff\\xfe.jpg"]


def test_manifest_row_spelling_an_undecodable_name_is_a_finding(undecodable, tmp_path):
    rows = [
        {"path": "id_0001/00.jpg", "identity": "a"},
        {"path": os.fsdecode(RAW_NAME), "identity": "a"},  # JSON writes "\udcff\udcfe"
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = validate_dataset(
        undecodable, ValidationConfig(cache_dir=str(tmp_path / "cache")), manifest=str(manifest)
    )
    assert report.layout == "manifest" and report.quarantine == [SHOWN]


def test_cli_reports_the_escaped_path_without_a_traceback(undecodable, tmp_path, capsys):
    report_path = tmp_path / "out" / "report.json"
    code = main(
        [
            "validate",
            str(undecodable),
            "--report",
            str(report_path),
            "--set",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1  # 1 bad file of 17 is over the default max_bad_fraction
    assert "Traceback" not in captured.err and "! undecodable_name" in captured.out
    assert SHOWN in captured.out
    report = json.loads(report_path.read_bytes().decode("utf-8"))
    assert report["quarantine"] == [SHOWN]
    assert report["checks"]["undecodable_name"]["examples"] == [SHOWN]
    quarantine = (report_path.parent / "quarantine.txt").read_bytes().decode("utf-8")
    assert SHOWN in quarantine.splitlines()
    assert SHOWN in report_path.with_suffix(".md").read_bytes().decode("utf-8")


def test_cli_passes_when_the_policy_allows_the_bad_name(undecodable, tmp_path, capsys):
    code = main(
        [
            "validate",
            str(undecodable),
            "--report",
            str(tmp_path / "report.json"),
            "--set",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
            "--set",
            "data.validation.max_bad_fraction=0.1",
        ]
    )
    assert code == 0 and "Traceback" not in capsys.readouterr().err


def test_training_index_skips_the_undecodable_name(undecodable, tmp_path):
    index = build_index(undecodable, cache_dir=tmp_path / "cache")
    assert len(index) == 16 and all(record.path.isascii() for record in index)
    assert len(index.fingerprint) == 16


def test_dataset_root_that_is_not_utf8_is_a_one_line_error(tmp_path):
    root = os.path.join(os.fsencode(tmp_path), b"\xff")
    try:
        os.mkdir(root)
    except OSError:
        pytest.skip("this filesystem refuses file names that are not UTF-8")
    with pytest.raises(SourceError, match=r"\\xff is not valid UTF-8"):
        LocalSource(os.fsdecode(root))


def test_entries_that_are_not_regular_files_are_not_images(odd_entries, tmp_path):
    """The directory is a nested folder (its image belongs to id_0001); the FIFO and the
    links to nothing and to a directory are skipped, as the listing always skipped them."""
    report = validate_dataset(odd_entries, ValidationConfig(cache_dir=str(tmp_path / "cache")))
    assert report.passed, report.failures
    assert report.files == 17 and report.bad_files == 0
    assert {name: c["count"] for name, c in report.checks.items() if c["count"]} == {
        "exact_duplicate": 1  # folder.jpg/inner.jpg is a copy of id_0002/00.jpg
    }
    index = build_index(odd_entries, cache_dir=tmp_path / "cache")
    paths = {record.path for record in index}
    assert "id_0001/folder.jpg/inner.jpg" in paths and len(paths) == 17
    not_files = {"folder.jpg", "pipe.jpg", "dangling.jpg", "linked_folder.jpg"}
    assert not {f"id_0001/{name}" for name in not_files} & paths
    assert sum(record.identity == "id_0001" for record in index) == 5


def test_cli_on_odd_entries_passes_without_a_traceback(odd_entries, tmp_path, capsys):
    report_path = tmp_path / "report.json"
    code = main(
        [
            "validate",
            str(odd_entries),
            "--report",
            str(report_path),
            "--set",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
        ]
    )
    assert code == 0 and "Traceback" not in capsys.readouterr().err
    assert json.loads(report_path.read_text())["files"] == 17


def _within(seconds: float, call):
    """``call()``'s exception (or None), failing the test if it blocks longer than ``seconds``."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)  # daemon: a blocked read cannot hang exit
    thread.start()
    thread.join(seconds)
    assert outcome, f"blocked for more than {seconds} s"
    return outcome[0]


@pytest.mark.parametrize(
    ("name", "error"),
    [("folder.jpg", IsADirectoryError), ("pipe.jpg", OSError), ("linked_folder.jpg", OSError)],
)
def test_reading_something_that_is_not_a_file_fails_at_once(odd_entries, name, error):
    source = LocalSource(odd_entries)
    for call in (source.read_bytes, source.stat):
        raised = _within(5, lambda call=call: call(f"id_0001/{name}"))
        assert isinstance(raised, error) and "not a regular file" in str(raised), raised


def test_manifest_that_is_a_directory_is_a_one_line_error(odd_entries, tmp_path, capsys):
    code = main(
        [
            "validate",
            str(odd_entries),
            "--manifest",
            "id_0001/folder.jpg",
            "--report",
            str(tmp_path / "report.json"),
            "--set",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "id_0001/folder.jpg" in err and "not a regular file" in err
