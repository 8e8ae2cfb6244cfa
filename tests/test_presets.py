"""Presets ship with the package: a wheel carries ``configs/`` as ``ffjobs/presets/`` and the
loader finds them from any working directory, installed or in a checkout."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import setuptools

from ffjobs.config import ConfigError, load_config
from ffjobs.config import presets as config_module

REPO = Path(__file__).resolve().parents[1]

LOAD_PRESETS = """
import json, ffjobs
from ffjobs.config import embedded_preset_dirs, load_config, resolve_preset
cluster = load_config("clusters/h200-ib")
print(json.dumps({
    "package": ffjobs.__file__,
    "dirs": [str(d) for d in embedded_preset_dirs()],
    "train_256": str(resolve_preset("train-256")),
    "train_256_name": load_config("train-256").name,
    "cluster": [cluster.name, cluster.model.resolution, cluster.slurm.gpus_per_node],
    "default": load_config(None).name,
}))
"""


def test_pyproject_lists_every_package_of_the_source_tree():
    # packages are listed, not found (see pyproject.toml): a new subpackage must be added there
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    on_disk = setuptools.find_packages(str(REPO), include=["ffjobs", "ffjobs.*"])
    assert sorted(set(listed) - {"ffjobs.presets", "ffjobs.presets.clusters"}) == sorted(on_disk)


def test_default_preset_is_the_shipped_one_whatever_the_working_directory(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "local.yaml").write_text("name: not-the-default\n")
    (tmp_path / "local.yaml").write_text("name: not-the-default-either\n")
    assert load_config(None).name == "local"
    assert load_config(None) == load_config(REPO / "configs" / "local.yaml")


def test_a_configs_directory_in_the_working_directory_still_wins_by_name(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "train-256.yaml").write_text("extends: local\nname: mine\n")
    assert load_config("train-256").name == "mine"


def test_missing_embedded_default_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(config_module, "embedded_preset_dirs", lambda: [])
    with pytest.raises(ConfigError, match=r"^presets/local\.yaml: the embedded default preset"):
        load_config(None)


def _build_wheel(out: Path) -> Path:
    """Build the wheel from a copy of the sources, so the checkout gets no build/ directory."""
    version = importlib.metadata.version("setuptools")
    if int(version.split(".")[0]) < 77:
        pytest.skip(f"setuptools {version} < 77 cannot build this pyproject.toml")
    src = out / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("ffjobs", "configs"):
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    command = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*command, "-q", "-w", str(out / "wheel")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (out / "wheel").glob("ffjobs-*.whl")
    return wheel


def test_wheel_ships_the_presets_and_finds_them_from_another_directory(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for preset in sorted(REPO.joinpath("configs").rglob("*.yaml")):
        assert f"ffjobs/presets/{preset.relative_to(REPO / 'configs').as_posix()}" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # only the unpacked wheel on PYTHONPATH; dependencies come from this venv's site-packages
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", LOAD_PRESETS],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(site)
    assert found["dirs"] == [str(site / "ffjobs" / "presets")]
    assert found["train_256"] == str(site / "ffjobs" / "presets" / "train-256.yaml")
    assert found["train_256_name"] == "ff256"
    assert found["cluster"] == ["ff256-h200", 256, 8]
    assert found["default"] == "local"
