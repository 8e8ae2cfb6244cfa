"""A checkpoint folder on a 2 MB tmpfs that fills up while two local ranks train: a storage
failure in one line naming the folder and its free space (exit 5, recorded as ``storage``, not
retryable), the previous checkpoint intact and verified, and an explicit resume once there is
room again goes on from it.

Mounting a tmpfs needs root (or CAP_SYS_ADMIN); without it the test is skipped, saying so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ffjobs.train.checkpoint import Checkpointer, data_name, manifest_name

from .helpers import TINY_MODEL

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a 2 MB tmpfs for the checkpoint folder: {exc}")
    if mounted.returncode != 0:
        pytest.skip(
            "cannot mount a 2 MB tmpfs for the checkpoint folder (needs root or CAP_SYS_ADMIN): "
            + (mounted.stderr.strip() or f"mount exited {mounted.returncode}")
        )
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def ffjobs(*args: str, sets: list[str]) -> list[str]:
    return [sys.executable, "-m", "ffjobs.cli", *args, *(a for s in sets for a in ("--set", s))]


def wait_for_logs(logs: Path, text: str, ranks: int = 2, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(logs.glob("*/train/logs/rank-*.log"))
        if len(found) == ranks and all(text in log.read_text(errors="replace") for log in found):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the ranks never said {text!r}")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_checkpoint_folder_that_fills_up_is_a_storage_failure_and_resumes(
    tmp_path, tiny_tmpfs, asynchronous
):
    go_on = tmp_path / "go-on"
    sets = [*TINY_MODEL, "model.identity_weights=null", "train.batch_size=2", "train.steps=6",
            "train.checkpoint_every=2", "train.log_every=1", "train.keep_checkpoints=10",
            f"train.async_checkpoint={str(asynchronous).lower()}", "train.faults.pause_at_step=3",
            f"train.faults.pause_until_file={go_on}", "tracking.enabled=false",
            f"runs_dir={tmp_path / 'runs'}", f"train.checkpoint_dir={tiny_tmpfs}"]  # fmt: skip
    command = ffjobs("train", "--nproc", "2", "--data", "memory", "--json", sets=sets)
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for_logs(tmp_path / "runs", "paused at step 3")
        while not list(tiny_tmpfs.glob(f"*/{manifest_name(2)}")):  # written in the background
            time.sleep(0.1)
        ballast = tiny_tmpfs / "ballast"  # someone else fills the disk: 64 KiB stay free
        ballast.write_bytes(b"\0" * (shutil.disk_usage(tiny_tmpfs).free - (64 << 10)))
        go_on.touch()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 5, err[-3000:]  # ExitCode.STORAGE
    outcome = json.loads(out)
    key = outcome["run_key"]
    folder = tiny_tmpfs / key
    summary = outcome["summary"]
    assert "\n" not in summary and "not retried" in summary, summary
    assert f"checkpoint folder {folder}: No space left on device (ENOSPC) writing " in summary
    assert " free of 2.0 MiB" in summary and outcome["facts"]["failure"] == "storage"
    log = tmp_path / "runs" / key / "train" / "attempts.jsonl"
    (only,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert only["kind"] == "storage" and not only["retryable"], only

    # nothing of the refused checkpoint: no hidden temporary file, no data file without manifest
    assert sorted(p.name for p in folder.iterdir()) == [manifest_name(2), data_name(2)]
    ref, state = Checkpointer(str(folder)).load_latest()  # verified, loaded as tensors only
    assert ref.step == 2 and state["step"] == 2

    ballast.unlink()  # room again: an explicit resume goes on from step 2
    resume = ffjobs("run", "--resume", key, "--stages", "train", "--json",
                    sets=[f"runs_dir={tmp_path / 'runs'}"])  # fmt: skip
    again = subprocess.run(resume, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    (train,) = json.loads(again.stdout)["stages"]
    assert train["facts"]["start_step"] == 2 and train["facts"]["final_step"] == 6
