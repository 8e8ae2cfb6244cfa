"""Shared inputs are made once, atomically: a lock while making, written aside and renamed into
place; a half-made one (a crashed maker's leftovers, a folder without its marker) is made
again and never used, and a complete one is never made again."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ffjobs.shared_inputs import leftovers, lock_file, make_once


def _write(text: str):
    def make(path: Path) -> None:
        path.write_text(text)

    return make


def test_made_once_then_used(tmp_path):
    target = tmp_path / "models" / "encoder.pt"
    said: list[str] = []
    assert make_once(target, _write("one"), what="the encoder", say=said.append)
    assert not make_once(target, _write("two"), what="the encoder", say=said.append)
    assert target.read_text() == "one"
    assert said == []
    assert sorted(p.name for p in target.parent.iterdir()) == [".encoder.pt.lock", "encoder.pt"]


def test_two_makers_at_once_make_it_once(tmp_path):
    target = tmp_path / "encoder.pt"
    calls, said, made = [], [], []
    started = threading.Event()

    def make(path: Path) -> None:
        calls.append(path)
        started.set()
        time.sleep(0.5)  # the other maker arrives meanwhile
        path.write_text(f"made by {threading.current_thread().name}")

    def maker() -> None:
        made.append(make_once(target, make, what="the encoder", say=said.append))

    first = threading.Thread(target=maker, name="first")
    first.start()
    started.wait(5)
    second = threading.Thread(target=maker, name="second")
    second.start()
    first.join(10)
    second.join(10)
    assert len(calls) == 1
    assert sorted(made) == [False, True]
    assert target.read_text() == "made by first"
    assert said == [f"waiting for another process making the encoder ({target})"]
    assert leftovers(target) == []


def test_a_failed_making_leaves_nothing_and_the_next_makes_it(tmp_path):
    target = tmp_path / "faces"

    def fails(path: Path) -> None:
        path.mkdir()
        (path / "a.jpg").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        make_once(target, fails, what="the dataset")
    assert not target.exists() and leftovers(target) == []

    def incomplete(path: Path) -> None:
        path.mkdir()  # returns without its marker

    with pytest.raises(RuntimeError, match="did not complete it"):
        make_once(target, incomplete, what="the dataset", complete=_marked)
    assert not target.exists() and leftovers(target) == []


def _marked(path: Path) -> bool:
    return (path / "done").is_file()


def _make_marked(path: Path) -> None:
    path.mkdir()
    (path / "a.jpg").write_text("whole")
    (path / "done").write_text("")


def test_a_half_made_folder_is_made_again_and_a_complete_one_is_kept(tmp_path):
    target = tmp_path / "faces"
    target.mkdir()
    (target / "a.jpg").write_text("half")  # not empty, but its maker never finished
    said: list[str] = []
    assert make_once(target, _make_marked, what="the dataset", complete=_marked, say=said.append)
    assert (target / "a.jpg").read_text() == "whole"
    assert said == [
        f"the dataset: {target} was not finished by its maker (faces); not used, making it again"
    ]
    assert leftovers(target) == []

    def never(path: Path) -> None:
        raise AssertionError("a complete dataset is made again")

    assert not make_once(target, never, what="the dataset", complete=_marked)


MAKER = """
import sys, time
from pathlib import Path
from ffjobs.shared_inputs import make_once

def make(path):
    path.mkdir()
    (path / "a.jpg").write_text("half")
    print("making", flush=True)
    time.sleep(60)

make_once(Path(sys.argv[1]), make, what="the dataset", complete=lambda p: (p / "done").is_file())
"""


def test_a_killed_makers_leftovers_are_made_again(tmp_path):
    """A maker killed while making (SIGKILL: no cleanup) leaves its temporary; the lock dies
    with it, and the next maker makes the dataset again instead of using the temporary."""
    target = tmp_path / "faces"
    maker = subprocess.Popen(
        [sys.executable, "-c", MAKER, str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert maker.stdout.readline() == "making\n"
    finally:
        maker.kill()
        maker.wait(10)
    half = leftovers(target)
    assert len(half) == 1 and (half[0] / "a.jpg").read_text() == "half"
    assert not target.exists() and lock_file(target).exists()
    said: list[str] = []
    assert make_once(target, _make_marked, what="the dataset", complete=_marked, say=said.append)
    assert (target / "a.jpg").read_text() == "whole"
    assert len(said) == 1 and half[0].name in said[0] and "making it again" in said[0]
    assert leftovers(target) == []


def test_the_synthetic_dataset_is_complete_only_with_its_marker(tmp_path):
    from ffjobs.data.synth import COMPLETE_MARKER, ensure_dataset

    out = tmp_path / "synthetic"
    (out / "id_0000").mkdir(parents=True)
    (out / "id_0000" / "00.jpg").write_bytes(b"half-written")  # "not empty" is not complete
    ensure_dataset(out, identities=3, per_identity=2, size=16, seed=0)
    assert len(list(out.glob("*/*.jpg"))) == 6
    marker = json.loads((out / COMPLETE_MARKER).read_text())
    assert marker == {"identities": 3, "per_identity": 2, "size": 16, "seed": 0, "images": 6}
    before = (out / COMPLETE_MARKER).stat().st_mtime_ns
    ensure_dataset(out, identities=3, per_identity=2, size=16, seed=0)
    assert (out / COMPLETE_MARKER).stat().st_mtime_ns == before  # used, not made again


STARTER = """
import sys, time, warnings
warnings.simplefilter("ignore")
from ffjobs.config.tracking import TrackingConfig
from ffjobs.tracking.mlflow_logger import start_run

tracking = TrackingConfig(tracking_uri="sqlite:///runs/mlflow.db", experiment="race")
import mlflow.tracking  # what takes time, before the start
from pathlib import Path

Path(sys.argv[1]).touch()
while not Path("go").exists():  # both start here
    time.sleep(0.005)
print(start_run(tracking, "run"))
"""


def test_the_sqlite_store_is_made_once_by_runs_starting_together(tmp_path):
    """Two processes creating their MLflow run at the same moment in a folder without a store:
    one makes it (schema, default experiment), the other waits, and both runs are created (an
    empty database that both processes migrate fails one of them)."""
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, f"ready-{n}"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in range(2)):
        assert time.monotonic() < deadline and all(s.poll() is None for s in starters)
        time.sleep(0.01)
    (tmp_path / "go").touch()
    outputs = [starter.communicate(timeout=120) for starter in starters]
    ids = [out.strip() for out, _ in outputs]
    assert all(len(i) == 32 for i in ids) and ids[0] != ids[1], outputs
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [".mlflow.db.lock", "mlflow.db"]
