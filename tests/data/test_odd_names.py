"""Odd entries: directories, FIFOs and links named like images. Validation skips what is not
a file and never crashes."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from ffjobs.cli import main
from ffjobs.data.config import ValidationConfig
from ffjobs.data.index import build_index
from ffjobs.data.sources import LocalSource
from ffjobs.data.validate import validate_dataset


def small_copy(clean_dataset: Path, root: Path) -> Path:
    """Four identities of four images each: 16 good files."""
    for folder in sorted(clean_dataset.iterdir())[:4]:
        (root / folder.name).mkdir(parents=True)
        for image in sorted(folder.iterdir())[:4]:
            shutil.copy(image, root / folder.name / image.name)
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
