"""``ffjobs data synth`` and ``ffjobs validate``: output, report files, exit codes."""

from __future__ import annotations

import json

from ffjobs.cli import main


def test_synth_then_validate_passes(tmp_path, capsys):
    out = tmp_path / "faces"
    assert (
        main(
            [
                "data",
                "synth",
                "--out",
                str(out),
                "--identities",
                "4",
                "--per-identity",
                "3",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["images"] == 12
    report = tmp_path / "r" / "report.json"
    code = main(
        [
            "validate",
            str(out),
            "--report",
            str(report),
            "--json",
            "--set",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["passed"] and printed["files"] == 12
    assert json.loads(report.read_text())["fingerprint"] == printed["fingerprint"]
    assert (report.parent / "report.md").read_text().startswith("# Dataset validation: passed")


def test_validate_corrupt_fails_with_table_and_quarantine(corrupt_dataset, tmp_path, capsys):
    report = tmp_path / "report.json"
    code = main(
        [
            "validate",
            str(corrupt_dataset),
            "--report",
            str(report),
            "--set",
            f"data.validation.cache_dir={tmp_path / 'cache'}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "! decompression_bomb" in out and "FAILED" in out
    quarantine = (tmp_path / "quarantine.txt").read_text().splitlines()
    assert "id_0005/bomb.png" in quarantine


def test_missing_dataset_is_a_one_line_usage_error(tmp_path, capsys):
    code = main(["validate", str(tmp_path / "nope"), "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "nope" in err and "Traceback" not in err
