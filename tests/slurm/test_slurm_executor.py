"""The submitit executor built from the cluster profile: parameters, folders, sbatch script."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import cloudpickle
import pytest

from ffjobs.config import load_config
from ffjobs.errors import UserError
from ffjobs.slurm.executor import executor_parameters, job_folder, make_executor, setup_lines

# The local executor's worker unpickles job functions; ship this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

DATA = Path(__file__).resolve().parent / "data"
GOLDEN_SBATCH = DATA / "cluster.sbatch"


def read_env(name: str) -> str | None:
    return os.environ.get(name)


@pytest.fixture
def fake_srun(tmp_path, monkeypatch) -> Path:
    """An ``srun`` on PATH so submitit's SLURM executor can be built without a cluster."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return srun


def cluster_config(tmp_path: Path, *overrides: str):
    return load_config(DATA / "cluster.yaml", [f"slurm.folder={tmp_path / 'jobs'}", *overrides])


def test_job_folder_is_keyed_by_run_and_attempt():
    assert job_folder("/shared/jobs", "run-7", 2) == Path("/shared/jobs/run-7/attempt-2/%j")
    with pytest.raises(UserError, match="run id"):
        job_folder("/shared/jobs", "../escape", 0)


def test_setup_exports_env_quoted_before_setup_lines():
    cfg = load_config(None, ["slurm.env={A: 'x y', B: \"it's\"}", "slurm.setup=[module load nccl]"])
    lines = setup_lines(cfg.slurm)
    assert lines == ["export A='x y'", "export B='it'\"'\"'s'", "module load nccl"]
    assert shlex.split(lines[1].removeprefix("export B="))[0] == "it's"


def test_invalid_env_name_is_a_config_error():
    with pytest.raises(UserError, match=r"slurm\.env: 'BAD-NAME' is not a valid"):
        load_config(None, ["slurm.env={BAD-NAME: 1x}"])


def test_slurm_parameters_carry_the_cluster_profile(tmp_path):
    cfg = cluster_config(
        tmp_path, "slurm.exclude=[gpu01, gpu07]", "slurm.container_image=nvcr.io/nvidia/pytorch:25.01",
        "slurm.srun_args=[--container-mounts=/data:/data]")  # fmt: skip
    params = executor_parameters(cfg.slurm, name="ff")
    assert params["nodes"] == 2 and params["tasks_per_node"] == 8 and params["gpus_per_node"] == 8
    assert params["slurm_partition"] == "gpu-h200" and params["slurm_account"] == "ml-platform"
    assert params["slurm_exclude"] == "gpu01,gpu07"
    assert params["slurm_srun_args"] == [  # one dead rank stops the rest at once
        "--container-image=nvcr.io/nvidia/pytorch:25.01", "--kill-on-bad-exit=1",
        "--container-mounts=/data:/data"]  # fmt: skip
    assert any(line.startswith("export NCCL_IB_HCA=") for line in params["slurm_setup"])


def test_local_parameters_have_no_slurm_keys_and_no_zero_gpus():
    cfg = load_config(None, ["slurm.env={FFJOBS_X: '1'}"])
    params = executor_parameters(cfg.slurm, name="local")
    assert not [key for key in params if key.startswith("slurm_")]
    assert "gpus_per_node" not in params
    assert params["local_setup"] == ["export FFJOBS_X=1"]


def test_sbatch_script_matches_golden(tmp_path, fake_srun):
    cfg = cluster_config(tmp_path, "slurm.python=python3", "slurm.exclude=[gpu03]",
                         "slurm.container_image=nvcr.io/nvidia/pytorch:25.01")  # fmt: skip
    executor = make_executor(cfg, run_id="run-1", attempt=1)
    text = executor._executor._make_submission_file_text(
        "python3 -u -m submitit.core._submit F", "u"
    )
    text = text.replace(str(tmp_path / "jobs"), "<folder>")
    if os.environ.get("FFJOBS_UPDATE_GOLDEN"):
        GOLDEN_SBATCH.write_text(text)
    assert text == GOLDEN_SBATCH.read_text()


def test_slurm_executor_without_srun_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="'srun' is not on PATH"):
        make_executor(cluster_config(tmp_path), run_id="r", attempt=0)


def test_local_executor_rejects_several_nodes(tmp_path):
    cfg = load_config(None, ["slurm.nodes=2", f"slurm.folder={tmp_path}"])
    with pytest.raises(UserError, match="slurm.nodes"):
        make_executor(cfg, run_id="r", attempt=0)


def test_local_executor_runs_with_env_in_the_attempt_folder(tmp_path):
    cfg = load_config(None, [f"slurm.folder={tmp_path}", "slurm.tasks_per_node=1",
                             "slurm.env={FFJOBS_PROBE: 'a b'}"])  # fmt: skip
    executor = make_executor(cfg, run_id="run-3", attempt=2)
    job = executor.submit(read_env, "FFJOBS_PROBE")
    assert job.result() == "a b"
    assert Path(job.paths.folder) == tmp_path / "run-3" / "attempt-2" / job.job_id
