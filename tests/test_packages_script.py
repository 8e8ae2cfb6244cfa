"""``infra/packages.sh`` installs the Debian packages a part of ffjobs needs and the machine
lacks: nothing when nothing is missing, and as a non-root user it names what to install,
failing for the local stack and warning for the browser. Run with a ``PATH`` of stand-ins, so
that no test reaches the real ``apt-get`` (nor, as root, writes ``/usr/sbin/policy-rc.d``): the
install itself runs in every CI on a fresh machine (``infra/test.sh``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "infra" / "packages.sh"
STACK = ("munged", "mariadbd", "slurmdbd", "slurmctld", "curl", "ip", "tc", "nsenter", "pkill")
BROWSER = ("chromium", "chromedriver")


def run(tmp_path: Path, parts: list[str], *, lacking: tuple[str, ...] = (), uid: int = 1000):
    """``packages.sh parts`` with every checked command present but ``lacking``, ``id -u``
    printing ``uid`` and an ``apt-get`` that records its calls in ``apt-calls``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {name: "exit 0" for name in (*STACK, *BROWSER, "dpkg") if name not in lacking}
    stubs["id"] = f"echo {uid}"
    stubs["apt-get"] = f'echo "$*" >> {tmp_path / "apt-calls"}'
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    for name in ("mktemp", "rm", "tail", "chmod", "cat"):
        (bin_dir / name).symlink_to(shutil.which(name))
    done = subprocess.run(
        [shutil.which("bash"), str(SCRIPT), *parts],
        env={"PATH": str(bin_dir), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    calls = tmp_path / "apt-calls"
    return done, calls.read_text() if calls.exists() else ""


def test_nothing_missing_installs_nothing(tmp_path):
    done, apt = run(tmp_path, ["stack", "browser"], uid=0)
    assert (done.returncode, done.stderr, apt) == (0, "", "")


@pytest.mark.parametrize(
    ("parts", "lacking", "code", "said"),
    [
        (["stack", "browser"], ("slurmctld", "chromium"), 1, "error: missing packages"),
        (["browser"], ("chromedriver",), 0, "browser tests need chromium-driver"),
    ],
)
def test_a_user_without_root_is_told_what_to_install(tmp_path, parts, lacking, code, said):
    done, apt = run(tmp_path, parts, lacking=lacking)
    assert done.returncode == code, done.stderr
    assert said in done.stderr and "sudo apt-get install" in done.stderr
    wanted = {"slurmctld": "slurm-wlm", "chromium": "chromium", "chromedriver": "chromium-driver"}
    assert all(wanted[name] in done.stderr for name in lacking), done.stderr
    assert apt == ""


def test_an_unknown_part_is_refused_by_name(tmp_path):
    done, apt = run(tmp_path, ["stack", "gpu"], uid=0)
    assert done.returncode == 2
    assert "unknown part 'gpu' (stack, browser)" in done.stderr
    assert apt == ""
