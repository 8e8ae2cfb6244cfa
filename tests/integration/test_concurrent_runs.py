"""Two ``ffjobs run`` of the embedded default started together in one empty folder share its
inputs (the synthetic dataset, both identity encoders, the SQLite MLflow store): each is made
once, by one of them, while the other waits for it; neither uses a half-made one.

On CPU, with a tiny model and dataset; the encoders' pre-training (300 steps each) is most of
the time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IDENTITIES, PER_IDENTITY = 12, 4
TINY = [
    f"data.synth.identities={IDENTITIES}",
    f"data.synth.per_identity={PER_IDENTITY}",
    "data.val_fraction=0.34",
    "model.width=16",
    "model.max_width=64",
    "model.residual_blocks=2",
    "model.discriminator_width=8",
    "model.discriminator_layers=2",
    "model.identity_width=0.0625",
    "model.identity_input_size=32",
    "model.identity_dim=32",
    "evaluate.identity_arch=iresnet18",
    "evaluate.identity_width=0.0625",
    "evaluate.identity_input_size=32",
    "evaluate.identity_dim=32",
    "evaluate.gate.min_ssim=null",
    "evaluate.gate.min_identity_top1=0",  # 2 steps learn nothing; the gate is not the point
    "train.steps=2",
    "train.checkpoint_every=2",
    "train.log_every=2",
    "train.batch_size=4",
    "slurm.tasks_per_node=1",
]
STAGES = 5  # validate, preflight, train, evaluate, register
PRETRAINED = {
    "the identity encoder": "pre-training the identity encoder into runs/models/identity.pt",
    "the evaluation encoder": (
        "pre-training the evaluation identity encoder into runs/models/identity-eval.pt"
    ),
}


def _watch_records(runs: Path, stop: threading.Event, seen: dict[str, dict]) -> None:
    """Each run's record as first seen after its first stage and before its last."""
    while not stop.wait(0.1):
        for path in runs.glob("*/run.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if 0 < len(record["stages"]) < STAGES:
                seen.setdefault(record["key"], record)


@pytest.mark.timeout(1500)  # about 4 minutes on a busy 2-core machine; far more when loaded
def test_two_runs_started_together_make_the_shared_inputs_once(tmp_path):
    sets = [arg for item in TINY for arg in ("--set", item)]
    command = [
        *(sys.executable, "-m", "ffjobs.cli", "run", "--json"),
        *("--config", str(REPO / "configs/local.yaml"), *sets),
    ]
    stop, seen = threading.Event(), {}
    watcher = threading.Thread(target=_watch_records, args=(tmp_path / "runs", stop, seen))
    watcher.start()
    started, runs = time.monotonic(), []
    try:
        runs = [
            subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=1400) for run in runs]
    finally:
        stop.set()
        watcher.join()
        for run in runs:  # a test that failed or timed out leaves no run behind
            if run.poll() is None:
                run.terminate()
                try:
                    run.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    run.kill()
                    run.wait()
    took = time.monotonic() - started
    errs = "\n".join(err.decode(errors="replace") for _, err in outputs)
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err.decode(errors="replace")[-4000:]
    summaries = [json.loads(out) for out, _ in outputs]

    # both validated and trained on the whole dataset, not a half-written one
    images = IDENTITIES * PER_IDENTITY
    dataset = tmp_path / "runs/data/synthetic"
    assert len(list(dataset.glob("*/*.jpg"))) == images
    for summary in summaries:
        assert all(s["status"] == "passed" for s in summary["stages"]), summary["stages"]
        report = json.loads((tmp_path / summary["run_dir"] / "validation/report.json").read_text())
        assert report["files"] == images, report

    # each encoder pre-trained once, by one of the two runs; nothing half-made left beside
    for what, line in PRETRAINED.items():
        assert errs.count(line) == 1, f"{what} pre-trained {errs.count(line)} times:\n{errs}"
    assert sorted(p.name for p in (tmp_path / "runs/models").iterdir()) == [
        ".identity-eval.pt.lock",
        ".identity.pt.lock",
        "identity-eval.pt",
        "identity-eval.pt.json",  # what made it (ffjobs.models.prepare)
        "identity.pt",
        "identity.pt.json",
    ]
    assert sorted(p.name for p in dataset.parent.iterdir()) == [".synthetic.lock", "synthetic"]

    # both MLflow runs were created at the start: the record has the id after the first stage
    assert "cannot start an MLflow run" not in errs
    keys = {summary["run_key"] for summary in summaries}
    assert set(seen) == keys
    ids = {key: record["mlflow_run_id"] for key, record in seen.items()}
    assert all(ids.values()) and len(set(ids.values())) == 2, ids
    assert {s["run_key"]: s["mlflow_run_id"] for s in summaries} == ids

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs/mlflow.db'}")
    for key, run_id in ids.items():
        run = client.get_run(run_id)
        assert run.info.run_name == key and run.info.status == "FINISHED"
        assert run.data.tags["ffjobs.validate"] == "passed"
    print(f"two concurrent runs: {took:.0f} s")
