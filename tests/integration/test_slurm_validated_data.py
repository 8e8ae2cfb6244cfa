"""On the real SLURM mini-cluster: a dataset file deleted after the run's validation and before
its training job starts is refused by the job's ranks before the first step; the attempt is
recorded as ``data``, naming the file by its path from the dataset root, and nothing retries it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

pytestmark = [pytest.mark.integration]

SETS = [
    *TINY_MODEL,
    "model.identity_weights=null",  # a random frozen encoder: no pre-training
    "data.synth.identities=6",
    "data.synth.per_identity=4",
    "train.batch_size=2",
    "train.steps=4",
    "train.precision=fp32",
    "train.init_timeout_s=60",
    "tracking.enabled=false",
    "slurm.retry_backoff_s=1",
    "slurm.time_min=5",
]


def ffjobs(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ffjobs.cli", *args, "--json"]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def env(local_stack) -> dict[str, str]:
    # the stack's SLURM_CONF stays; a surrounding job's or launcher's rank variables do not
    inherited = ("SLURM_JOB", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP", "RANK", "WORLD_SIZE")
    return {k: v for k, v in os.environ.items() if not k.startswith(inherited)}


def test_a_file_deleted_after_validation_is_refused_by_the_jobs_ranks(tmp_path, env):
    sets = [*SETS, f"runs_dir={tmp_path / 'runs'}", f"train.checkpoint_dir={tmp_path / 'ckpt'}",
            f"slurm.folder={tmp_path / 'jobs'}"]  # fmt: skip
    options = [arg for item in sets for arg in ("--set", item)]
    validated = ffjobs(tmp_path, env, "run", "-c", "minicluster", "--stages", "validate", *options)
    assert validated.returncode == 0, validated.stderr[-3000:]
    key = json.loads(validated.stdout)["run_key"]
    (tmp_path / "runs" / "data" / "synthetic" / "id_0002" / "01.jpg").unlink()

    trained = ffjobs(tmp_path, env, "run", "--resume", key, "--stages", "train",
                     "--set", f"runs_dir={tmp_path / 'runs'}")  # fmt: skip
    assert trained.returncode == 1, trained.stderr[-3000:]  # failed, not retryable (3)
    (train,) = json.loads(trained.stdout)["stages"]
    assert train["status"] == "failed" and "1 removed (id_0002/01.jpg)" in train["summary"]
    attempts = Path(train["facts"]["attempt_log"]).read_text().splitlines()
    (only,) = [json.loads(line) for line in attempts]  # one job, never resubmitted
    assert only["job_id"] and only["kind"] == "data" and not only["retryable"], only
    assert "training refused on rank" in only["summary"] and only["final_step"] is None
    assert not list((tmp_path / "ckpt").glob("*/step-*.pt"))
