"""A task below the scheduler's forkserver refuses to run when ffjobs' source changed after the
forkserver imported it (``ffjobs.airflow.loaded_code``); the real preload is imported by
``test_embedded.py`` and runs under every Airflow integration test."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException

from ffjobs.airflow import tasks
from ffjobs.airflow.loaded_code import PRELOAD, source_digest, stale_code


def test_the_digest_follows_every_source_file_and_nothing_else(tmp_path: Path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 2\n")
    first = source_digest(package)
    (package / "notes.txt").write_text("not source")
    assert source_digest(package) == first
    (package / "sub" / "b.py").write_text("B = 3\n")
    assert source_digest(package) != first
    (package / "sub" / "b.py").write_text("B = 2\n")
    assert source_digest(package) == first
    (package / "sub" / "b.py").rename(package / "b.py")  # same bytes, another module
    assert source_digest(package) != first


def preloaded(monkeypatch: pytest.MonkeyPatch, digest: str) -> None:
    module = types.ModuleType(PRELOAD)
    module.SOURCE_DIGEST = digest
    monkeypatch.setitem(sys.modules, PRELOAD, module)


def test_a_task_without_a_preload_or_on_the_same_source_runs(monkeypatch):
    monkeypatch.delitem(sys.modules, PRELOAD, raising=False)
    assert stale_code() is None
    preloaded(monkeypatch, source_digest())
    assert stale_code() is None
    tasks._refuse_stale_code()


def test_a_task_on_changed_source_fails_its_try_naming_the_restart(monkeypatch):
    preloaded(monkeypatch, "digest of the source the scheduler started with")
    message = stale_code()
    assert message and "restart the scheduler" in message and "ffjobs airflow up" in message
    with pytest.raises(
        AirflowException, match="changed after this Airflow's scheduler loaded"
    ) as e:
        tasks.attach({"run_dir": "runs/none"})  # refused before it reads the run
    assert type(e.value) is AirflowException  # retryable: a try after the restart runs
