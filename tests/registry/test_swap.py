"""``ffjobs swap`` on a registered, trained tiny model: the written face is the model's fusion of
the source's identity into the target, and every argument mistake is one line naming the file."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from ffjobs.cli import main
from ffjobs.registry.swap import load_face_swap, read_face, to_uint8
from ffjobs.runs.stages import run_stage

from .conftest import candidate_run


def _faces(data: Path) -> tuple[Path, Path]:
    """The first image of the first identity (source) and of the second (target)."""
    identities = sorted(p for p in data.iterdir() if p.is_dir())
    return tuple(sorted(p for p in folder.iterdir() if p.is_file())[0] for folder in identities[:2])


@pytest.mark.slow  # needs the trained session fixture
def test_swap_writes_a_face_with_the_source_identity(trained, tmp_path):
    config = copy.deepcopy(trained.config)
    config.registry.model_name = "swap-model"
    register = run_stage(config, candidate_run(trained, config), "register")
    assert register.status == "passed", register.summary
    source, target = _faces(trained.data)
    # a larger, non-square source: centre-cropped back to its face, then resized to 64 px
    wide = tmp_path / "source-wide.png"
    face = Image.open(source).convert("RGB").resize((128, 128), Image.Resampling.BICUBIC)
    canvas = Image.new("RGB", (160, 128), (0, 0, 0))
    canvas.paste(face, (16, 0))
    canvas.save(wide)
    out = tmp_path / "fused.png"

    env = {**os.environ, "MLFLOW_TRACKING_URI": config.tracking.tracking_uri}
    command = [
        sys.executable,
        "-m",
        "ffjobs.cli",
        "swap",
        "--model",
        "models:/swap-model@challenger",
    ]
    done = subprocess.run(
        [*command, str(wide), str(target), str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {out} (64x64)" in done.stdout and "to the source" in done.stdout
    assert Image.open(out).size == (64, 64)

    # the file is the registered model's fusion of the source's identity into the target.
    # Whether 24 steps moved this one pair's identity depends on the trajectory (thread count,
    # CPU), so the test checks what the command computes; learning has its own tests
    # (tests/train/test_learning.py, tests/evaluate/)
    model = load_face_swap(config.tracking, "models:/swap-model/1")
    written = to_uint8(read_face(out, 64))[0]  # the file's own bytes: 64 px, not resized
    source_face, target_face = read_face(wide, 64), read_face(target, 64)
    with torch.no_grad():
        fused = to_uint8(model(source_face, target_face))[0]
        roles_swapped = to_uint8(model(target_face, source_face))[0]
    # within one level of each byte: the command may run on another number of threads, whose
    # float sums differ in the last bits, and such a difference moves a byte's rounding by one
    assert (written.int() - fused.int()).abs().max() <= 1
    assert (written.int() - roles_swapped.int()).abs().max() > 1  # source and target in place

    again = subprocess.run(
        [*command, str(wide), str(target), str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert again.returncode == 2 and "exists; pass --force" in again.stderr


def test_swap_argument_mistakes_are_one_line(tmp_path, capsys):
    good = tmp_path / "face.png"
    Image.new("RGB", (40, 30), (120, 90, 60)).save(good)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    (tmp_path / "taken.png").write_bytes(b"")
    cases = {
        "broken.png: not a readable image": [str(broken), str(good), "out.png"],
        "missing.png: no such image file": ["missing.png", str(good), "out.png"],
        "taken.png: exists; pass --force": [str(good), str(good), "taken.png"],
        "no-dir: no such folder": [str(good), str(good), "no-dir/out.png"],
        "unknown image type .txt": [str(good), str(good), "out.txt"],
    }
    for expected, files in cases.items():
        code = main(["swap", "--model", "models:/none@champion", *files])
        err = capsys.readouterr().err
        assert code == 2 and expected in err and err.count("\n") == 1, (expected, err)
    # a model that is not there, with readable inputs: named with the store it was looked in
    code = main(
        ["swap", "--model", "models:/none@champion", str(good), str(good), "out.png",
         "--set", f"tracking.tracking_uri=sqlite:///{tmp_path / 'empty.db'}"]
    )  # fmt: skip
    last = capsys.readouterr().err.splitlines()[-1]  # after MLflow's own lines on a new store
    assert code == 2 and last.startswith("ffjobs: error: --model models:/none@champion: not found")
