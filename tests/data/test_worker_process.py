"""Worker processes start from any program: one with threads whose main module cannot run twice
(an Airflow task's, the ``airflow`` command) validates and generates a new dataset; a worker that
fails is reported with its own error."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ffjobs.data.synth import PARALLEL_FROM, _write_in_workers

# Like an Airflow task: a thread running, and a main module that fails when it runs again
# (Airflow's import dies on the database URL it blocks inside tasks; this one on its own guard).
PROGRAM = textwrap.dedent(
    """
    import json, os, sys, threading

    if os.environ.get("MAIN_RAN_ONCE"):
        raise RuntimeError("this program's main module ran again in a worker")
    os.environ["MAIN_RAN_ONCE"] = "1"
    threading.Thread(target=threading.Event().wait, daemon=True).start()

    from ffjobs.config.data import ValidationConfig
    from ffjobs.data.synth import generate_dataset
    from ffjobs.data.validate import validate_dataset

    dataset, cache, identities = sys.argv[1], sys.argv[2], int(sys.argv[3])
    generate_dataset(dataset, identities=identities, per_identity=8, size=32)
    report = validate_dataset(dataset, ValidationConfig(cache_dir=cache, workers=2))
    print(json.dumps({"passed": report.passed, "files": report.files, **report.timing}))
    """
)


def test_a_program_with_threads_whose_main_cannot_run_twice_validates_a_new_dataset(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    identities = PARALLEL_FROM // 8  # enough images for the generator's worker processes
    # Two fresh interpreters per pool, 512 small images drawn and inspected: seconds on two
    # idle cores; five minutes bounds a hang (a pool respawning dying workers), not the work.
    done = subprocess.run(
        [sys.executable, str(program), str(tmp_path / "faces"), str(tmp_path / "cache"),
         str(identities)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ran again" not in done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["passed"]
    # a dataset the cache never saw: every image inspected, by the two workers
    assert result["files"] == result["inspected"] == identities * 8
    assert not result["report_cached"]


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh-interpreter"])
def test_a_worker_that_fails_is_reported_with_its_own_error(tmp_path, monkeypatch, fork):
    monkeypatch.setattr("ffjobs.data.worker_process._fork_is_safe", lambda: fork)
    root = tmp_path / "faces"
    root.mkdir()
    (root / "id_0003").write_text("a file where an identity's folder goes")
    tasks = [(root, i, 2, 32, 0, "jpg") for i in range(4)]
    with pytest.raises(RuntimeError) as raised:
        _write_in_workers(tasks, processes=2)
    message = str(raised.value)
    assert message.startswith("synthetic-data worker "), message
    assert "exited with code 1: FileExistsError: " in message and "id_0003" in message
