"""A killed ``ffjobs run`` leaves nothing behind: during 2-rank training with a loader worker per
rank and asynchronous checkpoints, ``kill -9`` (or SIGTERM) of the command ends every process of
the run within seconds; ``ffjobs runs show`` tells what happened, and ``--resume`` finishes it.

Real processes, on CPU: the ranks are held at a known step (``train.faults.pause_at_step``)
while the command is killed. Every process of the run is found by a variable only this test's
command has in its environment, which each process it starts inherits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

from ffjobs.train.checkpoint import manifest_name

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARKER = "FFJOBS_TEST_KILLED_RUN"
PAUSE_AT = 4
START_S = 300
"""From ``ffjobs run`` to both ranks held at PAUSE_AT (the dataset, two ranks, a loader worker
each, the writer process): under a minute on a quiet 2-core machine."""
COMMAND_S = 120
"""``ffjobs runs show`` or ``list``: an import and a few small files, seconds."""
RESUME_S = 300
"""``ffjobs run --resume`` of the last 2 steps on two ranks: seconds of training."""
SETTINGS = [  # the tiny model, without a pre-trained encoder
    *TINY_MODEL,
    "model.identity_weights=null",
    "data.synth.identities=6",
    "data.synth.per_identity=4",
    "data.num_workers=1",
    "train.batch_size=2",
    "train.steps=6",
    "train.log_every=1",
    "train.checkpoint_every=2",
    "train.async_checkpoint=true",
    "tracking.enabled=false",
    f"train.faults.pause_at_step={PAUSE_AT}",
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the module's runs: the synthetic dataset is made once."""
    return tmp_path_factory.mktemp("killed-run")


def ffjobs(cwd: Path, *args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    command = [sys.executable, "-m", "ffjobs.cli", *args]
    return subprocess.Popen(command, cwd=cwd, env=env, text=True, **popen)


def ffjobs_json(cwd: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=COMMAND_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def marked(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment has this test's marker."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if f"{MARKER}={marker}".encode() in environ.split(b"\0"):
            found[int(proc.name)] = cmdline
    return found


def wait_until(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.2)
    return result


def start_paused(workdir: Path, key: str) -> tuple[subprocess.Popen, str, Path]:
    """``ffjobs run`` of training only, held at step PAUSE_AT on both ranks with every helper
    process running: the command, its marker and the file that ends the pause."""
    marker, go = uuid.uuid4().hex, workdir / f"go-{key}"
    sets = [arg for s in [*SETTINGS, f"train.faults.pause_until_file={go}"] for arg in ("--set", s)]
    with (workdir / f"{key}.log").open("w") as log:
        command = ffjobs(
            workdir,
            *("run", "--stages", "train", "--run-key", key, *sets),
            env={**os.environ, MARKER: marker},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    logs = workdir / "runs" / key / "train" / "logs"

    def paused() -> bool:
        assert command.poll() is None, (workdir / f"{key}.log").read_text()[-3000:]
        texts = [p.read_text() for p in logs.glob("rank-*.log")]
        return len(texts) == 2 and all(f"paused at step {PAUSE_AT}" in t for t in texts)

    wait_until(paused, START_S, "both ranks paused")
    checkpoint = workdir / "runs" / "checkpoints" / key / manifest_name(2)
    wait_until(checkpoint.exists, 60, "the writer process wrote step 2")
    processes = marked(marker).values()
    # the command; the ranks' parent (``-m ffjobs.forked_ranks ffjobs.train.worker``), two
    # ranks and a loader worker each (forks of that parent, so under its command line); the
    # writer process
    assert sum("ffjobs.forked_ranks ffjobs.train.worker" in p for p in processes) == 5, processes
    assert any("spawn_main" in p for p in processes), processes
    return command, marker, go


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
# the start, the writer (60 s), the end (60 s and 10 s), three reads, the resume, the checks
@pytest.mark.timeout(START_S + 60 + 70 + 3 * COMMAND_S + RESUME_S + 60)
def test_a_killed_run_leaves_no_process_and_says_so(workdir, sig):
    key = f"killed-{sig.name.lower()}"
    command, marker, go = start_paused(workdir, key)
    signalled = time.monotonic()
    command.send_signal(sig)
    # SIGTERM: the ranks checkpoint and stop first, and the command waits for them
    command.wait(timeout=60)
    ended = time.monotonic()
    deadline = max(signalled + 10, ended + 2)
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked(marker), (
        f"left {deadline - signalled:.1f} s after {sig.name}: {marked(marker)}"
    )
    print(
        f"{sig.name}: the command ended {ended - signalled:.1f} s after it, the last process of "
        f"the run {time.monotonic() - signalled:.1f} s after it"
    )

    shown = ffjobs_json(workdir, "runs", "show", key)
    if sig == signal.SIGKILL:  # nothing recorded the end: the owner is found gone
        assert shown["status"] == "abandoned", shown
        assert shown["state"].startswith(f"abandoned (owner pid {command.pid} on host ")
        assert shown["state"].endswith(" is gone)")
        listed = {r["key"]: r for r in ffjobs_json(workdir, "runs", "list")}
        assert listed[key]["status"] == "abandoned"
        assert shown["latest_checkpoint"]["step"] == 2
    else:  # the ranks were asked to stop, and the command recorded how the run ended
        assert shown["status"] not in ("running", "abandoned"), shown
        assert shown["latest_checkpoint"]["step"] >= 2

    go.touch()
    resume = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "run", "--resume", key, "--stages", "train"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=RESUME_S,
    )
    assert resume.returncode == 0, resume.stderr[-3000:] + resume.stdout[-3000:]
    if sig == signal.SIGKILL:
        found = f"run {key} was left running by pid {command.pid} on "
        assert found in resume.stdout and "which is gone; continuing from step 2" in resume.stdout
    shown = ffjobs_json(workdir, "runs", "show", key)
    assert shown["status"] == "passed" and shown["latest_checkpoint"]["step"] == 6
