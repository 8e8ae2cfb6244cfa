"""The local launcher's ranks are forks of one parent that imported what they share once, and
each still runs, exits and fails as ``python -m ENTRY`` would (ffjobs.forked_ranks)."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest

from ffjobs.local_ranks import LaunchFailed, launch_ranks
from ffjobs.process_tree import is_running

# imported once, by the parent, before the ranks are forked
SHARED = """
import os
with open(os.environ["IMPORTS"], "a") as out:
    out.write(f"{os.getpid()}\\n")
"""

# one rank: records what it sees, then does what the test asks of it
RANK = """
import atexit, json, os, signal, sys, time

def record():
    path = os.path.join(os.environ["OUT"], f"rank-{os.environ['RANK']}.json")
    with open(path + ".part", "w") as out:
        json.dump({
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "argv": sys.argv[1:],
            "rank": os.environ["RANK"],
            "local_rank": os.environ["LOCAL_RANK"],
            "shared": "shared_module" in sys.modules,
            "name": __name__,
        }, out)
    os.replace(path + ".part", path)

def rank_0_recorded():  # a rank that ends early waits: the test checks rank 0 was stopped
    while not os.path.exists(os.path.join(os.environ["OUT"], "rank-0.json")):
        time.sleep(0.01)

if __name__ == "__main__":
    record()
    print(f"rank {os.environ['RANK']} says hello")
    what = sys.argv[1]
    if what in ("fail", "die", "raise"):
        rank_0_recorded()
    if what == "exit-at-exit":
        atexit.register(lambda: open(os.path.join(os.environ["OUT"], "atexit-" + os.environ["RANK"]), "w").close())
        sys.exit(0)
    if what == "fail":
        sys.exit(7)
    if what == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "raise":
        raise ValueError("the rank's own bug")
    time.sleep(120)
"""


@pytest.fixture
def modules(tmp_path: Path) -> dict[str, str]:
    """The test modules on the ranks' path; the environment the launch is given."""
    (tmp_path / "shared_module.py").write_text(SHARED)
    (tmp_path / "rank_entry.py").write_text(RANK)
    return {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "IMPORTS": str(tmp_path / "imports"),
        "OUT": str(tmp_path),
    }


def launch(tmp_path: Path, env: dict[str, str], what: list[str], **kwargs) -> io.StringIO:
    console = io.StringIO()
    launch_ranks(
        "rank_entry",
        lambda rank: [what[rank], f"--rank-arg={rank}"],
        len(what),
        tmp_path / "logs",
        preload=kwargs.pop("preload", ("shared_module",)),
        console=console,
        env=env,
        timeout_s=kwargs.pop("timeout_s", 120),
    )
    return console


def seen(tmp_path: Path, rank: int) -> dict:
    return json.loads((tmp_path / f"rank-{rank}.json").read_text())


def test_ranks_are_forks_of_one_parent_that_imported_the_shared_modules_once(tmp_path, modules):
    console = launch(tmp_path, modules, ["exit-at-exit"] * 3)
    parents = (tmp_path / "imports").read_text().split()
    assert len(parents) == 1  # one import for three ranks
    for rank in range(3):
        record = seen(tmp_path, rank)
        assert record["ppid"] == int(parents[0])
        assert record["shared"] and record["name"] == "__main__"
        assert record["argv"] == ["exit-at-exit", f"--rank-arg={rank}"]
        assert (record["rank"], record["local_rank"]) == (str(rank), str(rank))
        log = (tmp_path / "logs" / f"rank-{rank:05d}.log").read_text()
        assert f"rank {rank} says hello" in log
        assert (tmp_path / f"atexit-{rank}").exists()  # an interpreter's exit: handlers ran
    assert console.getvalue() == "rank 0 says hello\n"  # rank 0's output only


@pytest.mark.parametrize(
    ("what", "ending"),
    [("fail", "exit status 7"), ("die", "signal 9"), ("raise", "exit status 1")],
)
def test_the_rank_that_ends_abnormally_is_named_and_the_others_are_stopped(
    tmp_path, modules, what, ending
):
    started = time.monotonic()
    with pytest.raises(LaunchFailed) as failure:
        launch(tmp_path, modules, ["sleep", what])
    assert time.monotonic() - started < 60  # not the sleeping rank's 120 s
    assert failure.value.rank == 1
    assert f"rank 1 ended with {ending}; the other ranks were stopped" in str(failure.value)
    if what == "raise":
        assert "ValueError: the rank's own bug" in str(failure.value)  # its log's last lines
    assert not is_running(seen(tmp_path, 0)["pid"])  # stopped and reaped before the error


def test_an_import_that_fails_before_the_fork_ends_the_launch_as_rank_0(tmp_path, modules):
    with pytest.raises(LaunchFailed, match=r"rank 0 ended with exit status 1") as failure:
        launch(tmp_path, modules, ["exit-at-exit"] * 2, preload=("no_such_module_here",))
    assert "No module named 'no_such_module_here'" in failure.value.log.read_text()
    assert not list(tmp_path.glob("rank-*.json"))  # no rank ran
