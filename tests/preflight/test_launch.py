"""The preflight's SLURM job comes from the shared executor factory: same shape as training."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ffjobs.config import load_config
from ffjobs.preflight.launch import _make_executor

CLUSTER = Path(__file__).resolve().parents[1] / "slurm" / "data" / "cluster.yaml"


@pytest.fixture
def fake_srun(tmp_path, monkeypatch) -> None:
    """An ``srun`` on PATH so submitit's SLURM executor can be built without a cluster."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_preflight_job_keeps_container_and_srun_args(tmp_path, fake_srun):
    cfg = load_config(CLUSTER, [
        f"slurm.folder={tmp_path / 'jobs'}", "slurm.container_image=nvcr.io/nvidia/pytorch:25.01",
        "slurm.srun_args=[--container-mounts=/data:/data]", "preflight.timeout_s=120"])  # fmt: skip
    executor = _make_executor(cfg, "ff-test-20261130-120000-abc123", attempt=0)
    params = executor._executor.parameters
    assert params["srun_args"] == [
        "--container-image=nvcr.io/nvidia/pytorch:25.01", "--kill-on-bad-exit=1",
        "--container-mounts=/data:/data"]  # fmt: skip
    assert (params["nodes"], params["ntasks_per_node"], params["gpus_per_node"]) == (2, 8, 8)
    assert params["partition"] == "gpu-h200"
    assert params["job_name"] == "ff-test-20261130-120000-abc123-preflight"  # the run key
    assert params["comment"] == "ffjobs run ff-test-20261130-120000-abc123 preflight"
    assert params["time"] == 5  # two preflight timeouts and a minute, not the training limit
    run_folder = tmp_path / "jobs" / "ff-test-20261130-120000-abc123.preflight"
    assert executor.folder == run_folder / "attempt-0" / "%j"
