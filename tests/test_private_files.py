"""A run directory is its owner's only: the directory and its tracking folder 0700, the
resolved config, the run record and the spool 0600, created so from the start."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ffjobs.config import load_config
from ffjobs.private_files import make_private_dir, open_private_append, write_private_text
from ffjobs.runs.run import create_run, finish_run, resume_run


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_paths_are_created_with_their_final_mode_under_a_permissive_umask(tmp_path):
    old = os.umask(0o002)  # group-writable by default: the modes must not depend on the umask
    try:
        folder = make_private_dir(tmp_path / "a" / "b")
        write_private_text(folder / "config.json", "{}\n")
        with open_private_append(folder / "spool.jsonl") as out:
            out.write("{}\n")
    finally:
        os.umask(old)
    assert _mode(folder) == 0o700
    assert _mode(folder / "config.json") == _mode(folder / "spool.jsonl") == 0o600


def test_a_replaced_file_is_private_whatever_mode_it_had(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("old\n")
    path.chmod(0o644)  # a run directory written before runs were private
    write_private_text(path, "new\n")
    assert (_mode(path), path.read_text()) == (0o600, "new\n")
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary left


def test_a_run_directory_is_readable_by_its_owner_only(tmp_path):
    config = load_config(
        "local",
        [f"runs_dir={tmp_path / 'runs'}", f"tracking.tracking_uri=sqlite:///{tmp_path}/m.db"],
    )
    old = os.umask(0o022)
    try:
        run = create_run(config, key="private", echo=lambda line: None)
        run.logger.log_metrics({"loss": 1.0}, step=0)
        run.stage_dir("validation")
        finish_run(run, "FINISHED")
        resume_run("private", config, echo=lambda line: None)  # rewrites run.json
    finally:
        os.umask(old)
    assert _mode(run.dir) == _mode(run.tracking_dir) == _mode(run.dir / "validation") == 0o700
    files = [p for p in run.dir.rglob("*") if p.is_file()]
    assert {"config.json", "run.json"} <= {p.name for p in files}
    assert any(p.name.startswith("spool-") for p in files)
    assert {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}
