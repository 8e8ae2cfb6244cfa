"""Validation finds every planted defect with its severity, passes a clean dataset, and caches."""

from __future__ import annotations

import builtins
import io
import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest
from PIL import ImageFile

from ffjobs.config.data import ValidationConfig
from ffjobs.data.checks import CHECKS
from ffjobs.data.index import build_index
from ffjobs.data.sources import LocalSource
from ffjobs.data.validate import validate_dataset


def assert_every_planted_defect_found(report, planted: dict[str, list[str]], skip=()) -> None:
    for check, items in planted.items():
        if check in skip:
            continue
        found = report.checks[check]
        assert found["severity"] == CHECKS[check].severity, check
        assert found["count"] == len(items), (check, found)
        for item in items:
            assert any(example.split(" (", 1)[0] == item for example in found["examples"]), (
                check,
                item,
                found["examples"],
            )


def test_corrupt_dataset_every_defect_found_with_its_severity(corrupt_dataset, tmp_path):
    planted = json.loads((corrupt_dataset / "planted.json").read_text())
    report = validate_dataset(corrupt_dataset, ValidationConfig(cache_dir=str(tmp_path)))
    assert report.layout == "manifest"
    assert_every_planted_defect_found(report, planted)
    assert not report.passed
    assert any(f.startswith("identity_leakage") for f in report.failures)
    assert any(f.startswith("bad files") for f in report.failures)
    errors = {
        item
        for check, items in planted.items()
        if CHECKS[check].severity == "error" and CHECKS[check].scope == "file"
        for item in items
    }
    assert set(report.quarantine) == errors


def test_clean_dataset_passes_without_findings(clean_dataset, tmp_path):
    report = validate_dataset(clean_dataset, ValidationConfig(cache_dir=str(tmp_path)))
    assert report.passed, report.failures
    assert report.files == 24 * 8 and report.identities == 24
    assert report.histogram == {"8-15": 24}
    assert {name: c["count"] for name, c in report.checks.items() if c["count"]} == {}
    assert report.fingerprint == build_index(clean_dataset, cache_dir=tmp_path).fingerprint


def test_policy_overrides_change_severity_and_verdict(corrupt_dataset, tmp_path):
    config = ValidationConfig(
        cache_dir=str(tmp_path),
        non_rgb_policy="reject",
        severity={"identity_leakage": "warning", "near_duplicate": "ignore"},
        max_bad_fraction=0.5,
    )
    report = validate_dataset(corrupt_dataset, config)
    assert report.checks["non_rgb"]["severity"] == "error"
    assert "id_0004/cmyk.jpg" in report.quarantine
    assert report.checks["near_duplicate"]["count"] == 0
    assert report.passed, report.failures


def test_revalidation_uses_cache_and_rechecks_a_changed_file(clean_dataset, tmp_path):
    root = tmp_path / "faces"
    shutil.copytree(clean_dataset, root)
    config = ValidationConfig(cache_dir=str(tmp_path / "cache"), workers=2)
    first = validate_dataset(root, config)
    assert first.timing["inspected"] == 192
    again = validate_dataset(root, config)
    assert again.timing["inspected"] == 0 and again.timing["report_cached"]
    assert again.to_dict()["checks"] == first.to_dict()["checks"]
    victim = root / "id_0003" / "02.jpg"
    victim.write_bytes(victim.read_bytes()[:300])  # truncated in place
    changed = validate_dataset(root, config)
    assert changed.timing["inspected"] == 1
    assert changed.checks["truncated"]["examples"] == ["id_0003/02.jpg"]
    assert changed.fingerprint != first.fingerprint


def test_decompression_bomb_is_never_decoded(corrupt_dataset, tmp_path, monkeypatch):
    decoded_sizes = []
    real_load = ImageFile.ImageFile.load

    def spying_load(image):
        decoded_sizes.append(image.size)
        return real_load(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", spying_load)
    # workers=1: inspection runs in this process, where the spy is installed.
    report = validate_dataset(corrupt_dataset, ValidationConfig(cache_dir=str(tmp_path), workers=1))
    assert report.checks["decompression_bomb"]["examples"] == ["id_0005/bomb.png"]
    assert decoded_sizes and max(w * h for w, h in decoded_sizes) < 1_000_000


def test_escaping_paths_are_rejected_without_being_read(corrupt_dataset, tmp_path, monkeypatch):
    """Every file descriptor opened during validation is resolved through /proc: none is outside."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to see what each descriptor points at")
    outside = (corrupt_dataset.parent / f"{corrupt_dataset.name}.outside").resolve()
    opened: list[Path] = []
    real_os_open, real_open = os.open, builtins.open

    def spying_os_open(*args, **kwargs):
        fd = real_os_open(*args, **kwargs)
        opened.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        return fd

    def spying_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        if hasattr(handle, "fileno"):
            opened.append(Path(os.readlink(f"/proc/self/fd/{handle.fileno()}")))
        return handle

    monkeypatch.setattr(os, "open", spying_os_open)
    monkeypatch.setattr(builtins, "open", spying_open)
    monkeypatch.setattr(io, "open", spying_open)  # pathlib opens through io.open
    # workers=1: inspection runs in this process, where the spies are installed.
    report = validate_dataset(corrupt_dataset, ValidationConfig(cache_dir=str(tmp_path), workers=1))
    monkeypatch.undo()
    assert report.checks["path_escape"]["count"] == 2
    assert any(p.name == "00.jpg" for p in opened), "the spies must see the dataset's own reads"
    assert not [p for p in opened if outside == p or outside in p.parents]


def test_local_source_refuses_traversal(corrupt_dataset):
    source = LocalSource(corrupt_dataset)
    for path in ("../x.png", "/etc/passwd", "id_0009/escape.jpg"):
        with pytest.raises(ValueError):
            source.read_bytes(path)


@pytest.mark.parametrize("layout", ["manifest", "identity_folders"])
def test_report_is_the_same_with_and_without_the_worker_pool(corrupt_dataset, tmp_path, layout):
    """One worker inspects in this process after the listing; two stream the listing into a
    pool with shrinking tail chunks. Same files, same facts, same report."""
    reports = [
        validate_dataset(
            corrupt_dataset,
            ValidationConfig(cache_dir=str(tmp_path / str(workers)), workers=workers),
            layout=layout,
        ).to_dict()
        for workers in (1, 2)
    ]
    for report in reports:
        report.pop("timing")
    assert reports[0] == reports[1]
    assert reports[0]["layout"] == layout


def test_clean_dataset_streamed_into_the_pool_matches_one_process(
    clean_dataset, tmp_path, monkeypatch
):
    from ffjobs.data import validate
    from ffjobs.data.pool import InspectionPool

    events = []
    real_submit, real_layout = InspectionPool._submit, validate.layout_entries

    def spying_submit(*args):
        events.append("submitted")
        return real_submit(*args)

    def spying_layout(*args, **kwargs):
        events.append("listed")
        return real_layout(*args, **kwargs)

    monkeypatch.setattr(InspectionPool, "_submit", spying_submit)
    monkeypatch.setattr(validate, "layout_entries", spying_layout)
    one, two = (
        validate_dataset(
            clean_dataset, ValidationConfig(cache_dir=str(tmp_path / str(w)), workers=w)
        )
        for w in (1, 2)
    )
    assert two.timing["inspected"] == one.timing["inspected"] == 192
    assert events[0] == "listed"  # one worker: read in this process after the listing
    assert events[1] == "submitted"  # two: the pool was reading before the listing ended
    assert one.to_dict() | {"timing": None} == two.to_dict() | {"timing": None}


def test_unchanged_dataset_starts_no_worker(clean_dataset, tmp_path, monkeypatch):
    config = ValidationConfig(cache_dir=str(tmp_path), workers=2)
    validate_dataset(clean_dataset, config)

    def no_worker(*args, **kwargs):
        raise AssertionError("an unchanged dataset must not start workers")

    monkeypatch.setattr("ffjobs.data.pool.WorkerProcess", no_worker)
    again = validate_dataset(clean_dataset, config)
    assert again.timing["report_cached"]
    policy = ValidationConfig(cache_dir=str(tmp_path), workers=2, min_images_per_identity=9)
    rejudged = validate_dataset(clean_dataset, policy)  # new policy: facts reused, no reads
    assert rejudged.timing["inspected"] == 0 and not rejudged.timing["report_cached"]
    assert rejudged.checks["small_identity"]["count"] == 24


def _exit_3(*args):
    os._exit(3)


def _killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)


def _own_error(*args):
    raise SystemExit("libfoo: out of file descriptors")  # escapes the per-chunk answer


@pytest.mark.parametrize(
    ("death", "said"),
    [
        (_exit_3, "exited with code 3"),
        (_killed, r"was killed by SIGKILL \(the out-of-memory killer sends it\)"),
        (_own_error, "exited with code 1: libfoo: out of file descriptors"),
    ],
)
def test_a_worker_that_dies_is_reported_as_it_died_not_waited_for(
    clean_dataset, tmp_path, monkeypatch, death, said
):
    from ffjobs.data.pool import WorkerDied

    # forked workers run this process's (patched) code; the fresh-interpreter ones are
    # tested in test_worker_process.py
    monkeypatch.setattr("ffjobs.data.worker_process._fork_is_safe", lambda: True)
    monkeypatch.setattr("ffjobs.data.pool._inspect_chunk", death)
    config = ValidationConfig(cache_dir=str(tmp_path), workers=2)
    with pytest.raises(WorkerDied) as raised:
        validate_dataset(clean_dataset, config)
    assert re.search(
        rf"^validation worker \d+ {said}, while inspecting one of \d+ files, id_\d+/",
        str(raised.value),
    ), raised.value
    assert "decoder crash" not in str(raised.value)


def test_a_changed_manifest_outside_the_root_is_not_answered_from_the_cached_report(
    clean_dataset, tmp_path
):
    manifest = tmp_path / "elsewhere" / "faces.jsonl"
    manifest.parent.mkdir()
    rows = [
        {"path": p.relative_to(clean_dataset).as_posix(), "identity": p.parent.name}
        for p in sorted(clean_dataset.glob("*/*.jpg"))
    ]
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = ValidationConfig(cache_dir=str(tmp_path / "cache"))
    first = validate_dataset(clean_dataset, config, manifest=str(manifest))
    assert first.passed and first.files == 192
    assert validate_dataset(clean_dataset, config, manifest=str(manifest)).timing["report_cached"]
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows[:100]))
    fewer = validate_dataset(clean_dataset, config, manifest=str(manifest))
    assert not fewer.timing["report_cached"] and fewer.files == 100
    assert fewer.fingerprint != first.fingerprint


def test_a_new_report_version_is_not_answered_from_the_cached_report(
    clean_dataset, tmp_path, monkeypatch
):
    """Reports cached before a check was added lack its row: REPORT_VERSION retires them."""
    from ffjobs.data import validate

    config = ValidationConfig(cache_dir=str(tmp_path / "cache"))
    validate_dataset(clean_dataset, config)
    assert validate_dataset(clean_dataset, config).timing["report_cached"]
    monkeypatch.setattr(validate, "REPORT_VERSION", validate.REPORT_VERSION + 1)
    rebuilt = validate_dataset(clean_dataset, config)
    assert not rebuilt.timing["report_cached"] and rebuilt.timing["inspected"] == 0
