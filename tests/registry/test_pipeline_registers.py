"""``ffjobs run`` ends with a registered challenger and says where to review it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from train.helpers import place_local_encoders

REPO = Path(__file__).resolve().parents[2]
PIPELINE_S = 600
"""The whole pipeline with the encoders given: under a minute on a quiet 2-core machine, 10
times that for a loaded one."""
QUICK = [
    "--set", "train.steps=4",
    "--set", "train.checkpoint_every=2",
    "--set", "train.log_every=2",
    "--set", "train.batch_size=4",
    # 4 steps cannot pass the gate's quality floor (it blocks an untrained model, as it should);
    # what is checked here is that a passing model ends the run registered
    "--set", "evaluate.gate.min_ssim=0",
    "--set", "evaluate.gate.min_identity_top1=0",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(PIPELINE_S + 60)  # the pipeline, then a look at the registry
def test_ffjobs_run_registers_the_challenger(tmp_path):
    pytest.importorskip("ffjobs.evaluate.stage", reason="needs the evaluate stage")
    place_local_encoders(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "run", "--config", str(REPO / "configs/local.yaml"),
         *QUICK],
        cwd=tmp_path, capture_output=True, text=True, timeout=PIPELINE_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[ passed] register" in done.stdout
    assert "pre-training" not in done.stderr  # the encoders placed were made from this data
    assert "model ffjobs-face-swap version 1 is the challenger, pending review" in done.stdout
    assert "ffjobs registry approve ffjobs-face-swap 1 --reason" in done.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs/mlflow.db'}")
    aliases = client.get_registered_model("ffjobs-face-swap").aliases
    assert {alias: str(v) for alias, v in aliases.items()} == {"challenger": "1"}
