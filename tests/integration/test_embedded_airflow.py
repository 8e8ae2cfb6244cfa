"""``make demo``'s path with the real Airflow: ``ffjobs airflow up`` in a fresh working folder,
``ffjobs airflow trigger`` of a tiny run with an injected communicator failure that the train
task's retry recovers from, the run followed to its end (or its review), a second ``up`` that
reuses the running Airflow, and ``down`` that leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_stack import EVALUATION_ENCODER, write_evaluation_encoder

from ffjobs.airflow.embedded import COMPONENTS, START_TIMEOUT_S, EmbeddedAirflow, descendants
from ffjobs.process_tree import is_running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "train.steps=4",
    "train.checkpoint_every=2",  # the failure goes to step 3, the retry resumes from step 2
    "train.log_every=1",
    "train.batch_size=4",
    "model.identity_weights=null",
    "evaluate.gate.min_ssim=0",  # 4 steps cannot pass the quality floor; the path is checked
    "evaluate.gate.min_identity_top1=0",
    f"evaluate.identity_weights={EVALUATION_ENCODER}",
]
# Starting Airflow takes up to a minute on two busy cores; each of the five tasks starts an
# interpreter that imports Airflow and ffjobs (tens of seconds), train twice with a 10 s retry
# delay: about five minutes there. Fifteen bound a hang.
RUN_TIMEOUT_S = 900


def ffjobs(workdir: Path, *args: str, timeout: float = RUN_TIMEOUT_S):
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.timeout(START_TIMEOUT_S + RUN_TIMEOUT_S + 300)  # up, the run, down's grace
def test_demo_path_recovers_reuses_and_stops_clean(tmp_path):
    write_evaluation_encoder(tmp_path)
    airflow = EmbeddedAirflow(tmp_path)
    try:
        up = ffjobs(tmp_path, "airflow", "up")
        assert up.returncode == 0, up.stdout + up.stderr[-3000:]
        assert "Airflow running at http://127.0.0.1:" in up.stdout
        pids = airflow.running()
        assert sorted(pids) == sorted(COMPONENTS)

        args = [f"--set={s}" for s in TINY]
        run = ffjobs(tmp_path, "airflow", "trigger", *args, "--inject-communicator-failure")
        out = run.stdout
        assert run.returncode == 0, out + run.stderr[-3000:]
        assert "with one injected communicator failure at training step 3" in out
        assert "train      up_for_retry" in out and "train      success (try 2)" in out
        assert "recovered: attempt 2 resumed from the checkpoint at step 2" in out
        assert "awaiting review" in out or ": finished" in out
        assert f"Airflow:  {airflow.settings().url}  (user admin" in out
        assert "mlflow ui --backend-store-uri sqlite:///runs/mlflow.db" in out
        assert "ffjobs registry approve " in out  # the model's name and version, ready to run
        evaluated = next(line for line in out.splitlines() if line.startswith("evaluate: "))
        assert "identity_top1 " in evaluated and "chance 0.2:" in evaluated  # 5 held out
        assert " dB [" in evaluated  # each metric with its interval: psnr's too
        key = next(
            line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("run ")
        )
        attempts = [
            json.loads(line)
            for line in (tmp_path / "runs" / key / "train" / "attempts.jsonl")
            .read_text()
            .splitlines()
        ]
        assert [a["kind"] for a in attempts] == ["communicator", None]

        again = ffjobs(tmp_path, "airflow", "up")
        assert again.returncode == 0 and "reused" in again.stdout, again.stdout + again.stderr
        assert airflow.running() == pids
    finally:
        below = descendants(airflow.running().values())
        down = ffjobs(tmp_path, "airflow", "down", timeout=120)
    assert down.returncode == 0 and "stopped Airflow" in down.stdout, down.stdout + down.stderr
    assert airflow.running() == {}
    assert not [pid for pid, start in below.items() if is_running(pid, start)]
    assert [*pids.values()] and not any(is_running(pid) for pid in pids.values())
    assert "not running" in ffjobs(tmp_path, "airflow", "down", timeout=120).stdout
