"""``ffjobs run``, the README's main job: every invocation is a new run (own key, run directory,
checkpoint folder and MLflow run); ``--resume`` continues one; the first stage that says no
stops the pipeline with its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from train.helpers import place_local_encoders

REPO = Path(__file__).resolve().parents[1]
QUICK = [
    "--set", "train.steps=4",
    "--set", "train.checkpoint_every=2",
    "--set", "train.log_every=2",
    "--set", "train.batch_size=4",
    "--set", "model.identity_weights=null",
    "--set", "data.synth.identities=6",
    "--set", "data.synth.per_identity=4",
]  # fmt: skip
UP_TO_TRAIN = ["--stages", "validate,preflight,train"]
"""What these tests are about; evaluation has its own (tests/evaluate/)."""
RUN_S = 300
"""One ``ffjobs run`` of :data:`QUICK` up to training (a two-rank preflight, 4 steps on two
ranks): about 20 s on a quiet 2-core machine, 15 times that for a loaded one."""
COMMAND_S = 120
"""A command that only reads or refuses (``runs list``, ``runs show``, a refused resume): an
import and a few small files, seconds."""


def ffjobs(cwd: Path, *args: str, timeout: float = COMMAND_S) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ffjobs.cli", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def ffjobs_run(cwd: Path, *args: str, timeout: float = RUN_S) -> subprocess.CompletedProcess:
    return ffjobs(cwd, "run", "--config", str(REPO / "configs/local.yaml"), *args, timeout=timeout)


def mlflow_client(cwd: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{cwd / 'runs/mlflow.db'}")


def snapshot(client, run_id: str) -> dict:
    """What a later run must leave alone: status, end time, params and every metric point."""
    run = client.get_run(run_id)
    metrics = {
        key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        for key in run.data.metrics
    }
    return {
        "status": run.info.status,
        "end_time": run.info.end_time,
        "params": dict(run.data.params),
        "metrics": metrics,
    }


@pytest.mark.slow
@pytest.mark.timeout(4 * RUN_S + 3 * COMMAND_S + 60)  # four runs, three reads, the checks
def test_each_run_is_its_own_and_resume_continues_one(tmp_path):
    first = ffjobs_run(tmp_path, *QUICK, *UP_TO_TRAIN, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    one = json.loads(first.stdout)
    assert [s["name"] for s in one["stages"]] == ["validate", "preflight", "train"]
    assert all(s["status"] == "passed" for s in one["stages"])
    assert "PASS" in one["stages"][1]["summary"]
    assert "steps 0 -> 4" in one["stages"][2]["summary"]
    run_dir = tmp_path / one["run_dir"]
    assert run_dir == tmp_path / "runs" / one["run_key"]
    assert (run_dir / "validation" / "report.json").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "passed"
    assert one["checkpoint_dir"] == str(Path("runs/checkpoints") / one["run_key"])
    assert (tmp_path / one["checkpoint_dir"] / "step-00000004.pt").exists()

    client = mlflow_client(tmp_path)
    run = client.get_run(one["mlflow_run_id"])
    assert run.info.run_name == one["run_key"]
    assert run.data.tags["ffjobs.run_key"] == one["run_key"]
    assert run.data.tags["ffjobs.validate"] == run.data.tags["ffjobs.train"] == "passed"
    assert run.data.params["train.steps"] == "4"
    # training logged into the pipeline's run, not a run of its own
    assert any(key.startswith("loss") for key in run.data.metrics), run.data.metrics
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "validate")}
    assert "validate/report.json" in artifacts
    before = snapshot(client, one["mlflow_run_id"])
    assert before["status"] == "FINISHED"

    # the same command again: a new run that trains from step 0 and touches nothing of the first
    second = ffjobs_run(tmp_path, *QUICK, *UP_TO_TRAIN, "--json")
    assert second.returncode == 0, second.stderr[-3000:]
    two = json.loads(second.stdout)
    assert two["run_key"] != one["run_key"] and two["run_dir"] != one["run_dir"]
    assert two["checkpoint_dir"] != one["checkpoint_dir"]
    assert two["mlflow_run_id"] != one["mlflow_run_id"]
    assert "steps 0 -> 4" in two["stages"][2]["summary"]
    assert snapshot(client, one["mlflow_run_id"]) == before
    experiment = client.get_experiment_by_name("ffjobs")
    assert len(client.search_runs([experiment.experiment_id])) == 2

    # resuming the first run with nothing left to train says so, and is not a fresh success
    same = ffjobs(
        tmp_path, "run", "--resume", one["run_key"], *UP_TO_TRAIN, "--json", timeout=RUN_S
    )
    assert same.returncode == 0, same.stderr[-3000:]
    train = json.loads(same.stdout)["stages"][2]
    assert train["status"] == "skipped" and "nothing to train" in train["summary"]

    # raising train.steps continues the first run: its checkpoints, its MLflow run
    longer = ["--set", "train.steps=6", "--json"]
    more = ffjobs(tmp_path, "run", "--resume", one["run_key"], *UP_TO_TRAIN, *longer, timeout=RUN_S)
    assert more.returncode == 0, more.stderr[-3000:]
    resumed = json.loads(more.stdout)
    assert resumed["run_key"] == one["run_key"]
    assert resumed["mlflow_run_id"] == one["mlflow_run_id"]
    assert resumed["checkpoint_dir"] == one["checkpoint_dir"]
    assert "steps 4 -> 6" in resumed["stages"][2]["summary"]
    after = snapshot(client, one["mlflow_run_id"])
    assert after["status"] == "FINISHED"
    steps = [step for step, _ in after["metrics"]["loss_identity"]]
    assert steps == [2, 4, 6]  # the earlier points kept, the new ones appended, none twice
    assert snapshot(client, two["mlflow_run_id"])["metrics"]["loss_identity"]

    # ffjobs runs: both runs, newest first; one run's stages, checkpoint and MLflow link
    listed = json.loads(ffjobs(tmp_path, "runs", "list", "--json").stdout)
    assert {r["key"] for r in listed} == {one["run_key"], two["run_key"]}
    shown = ffjobs(tmp_path, "runs", "show", one["run_key"], "--json")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["latest_checkpoint"]["step"] == 6 and detail["passes"] == 3
    assert [s["name"] for s in detail["stages"]] == ["validate", "preflight", "train"]
    assert one["mlflow_run_id"] in detail["mlflow"]
    human = ffjobs(tmp_path, "runs", "show", one["run_key"])
    assert "latest verified step 6" in human.stdout and "[ passed] train" in human.stdout


@pytest.mark.slow  # a run up to training, with two held-out measurements
@pytest.mark.timeout(RUN_S + 60)  # one run, the checks
def test_a_run_measures_its_model_on_held_out_identities_as_it_trains(tmp_path):
    place_local_encoders(tmp_path)  # the evaluation recogniser, where the preset looks for it
    every = ["--set", "evaluate.every_steps=2",  # on the preset's own data, as the encoders
             "--set", "data.synth.identities=24", "--set", "data.synth.per_identity=8"]  # fmt: skip
    done = ffjobs_run(tmp_path, *QUICK, *every, *UP_TO_TRAIN, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [x for x in done.stderr.splitlines() + done.stdout.splitlines() if "held-out at" in x]
    assert [x.split(":")[0] for x in lines] == ["held-out at step 2", "held-out at step 4"], lines
    assert "5 held-out identities" in lines[-1] and " [" in lines[-1]  # with its interval
    assert "pre-training" not in done.stderr  # the encoders placed were made from this data
    run = json.loads(done.stdout)
    history = snapshot(mlflow_client(tmp_path), run["mlflow_run_id"])["metrics"]
    for metric in ("heldout_identity_top1", "heldout_identity_cosine", "heldout_psnr"):
        assert [step for step, _ in history[metric]] == [2, 4], metric
    assert [step for step, _ in history["loss_identity_cross"]] == [2, 4]


def test_resume_refuses_another_model_shape_or_dataset(tmp_path):
    first = ffjobs_run(tmp_path, *QUICK, "--stages", "validate", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    key = json.loads(first.stdout)["run_key"]
    record = (tmp_path / "runs" / key / "run.json").read_text()

    wider = ffjobs(tmp_path, "run", "--resume", key, "--set", "model.width=48")
    assert wider.returncode == 2
    assert wider.stderr.count("\n") == 1 and "Traceback" not in wider.stderr
    assert "model.width is 48 but the run was started with 32" in wider.stderr
    assert (tmp_path / "runs" / key / "run.json").read_text() == record  # nothing changed

    from ffjobs.data.synth import generate_dataset

    other = generate_dataset(tmp_path / "other", identities=6, per_identity=4, seed=7)
    moved = ffjobs(tmp_path, "run", "--resume", key, "--set", f"data.source={other}")
    assert moved.returncode == 2, moved.stderr[-2000:]
    assert "the data changed" in moved.stderr and "Traceback" not in moved.stderr


def test_failed_validation_stops_before_training(tmp_path):
    from ffjobs.data.synth import generate_dataset

    dataset = generate_dataset(tmp_path / "bad", identities=12, per_identity=3, corrupt=True)
    result = ffjobs_run(tmp_path, *QUICK, "--set", f"data.source={dataset}",
                        "--set", "data.validation.max_bad_fraction=0.0")  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    assert "[ failed] validate" in result.stdout
    assert "train" not in result.stdout.split("[ failed] validate")[1]
    assert "pipeline FAILED" in result.stdout


@pytest.mark.timeout(2 * RUN_S + COMMAND_S)  # the run with evaluate, then register alone
def test_a_blocked_gate_stops_the_run_and_register_says_why(tmp_path):
    import torch

    from ffjobs.config import load_config
    from ffjobs.models.identity import build_identity_backbone
    from ffjobs.quality.encoder import evaluation_identity_settings

    # an untrained evaluation encoder (no identity metric is gated here): no pre-training
    settings = evaluation_identity_settings(load_config("local"))
    torch.save(build_identity_backbone(settings).state_dict(), tmp_path / "encoder.pt")
    result = ffjobs_run(tmp_path, *QUICK, "--stages", "validate,train,evaluate,register",
                        "--set", "data.synth.identities=10",  # 2 held out to evaluate on
                        "--set", "evaluate.identity_weights=encoder.pt",
                        "--set", "evaluate.gate.min_identity_top1=0",
                        "--set", "evaluate.gate.min_psnr=99")  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]  # a negative verdict
    assert "[blocked] evaluate" in result.stdout and "register" not in result.stdout
    assert "pipeline blocked by the evaluation gate" in result.stdout
    (record,) = (tmp_path / "runs").glob("*/run.json")
    assert json.loads(record.read_text())["status"] == "blocked"
    key = record.parent.name

    # the register stage on its own: a decision to skip, with the reason, exit 0
    again = ffjobs(tmp_path, "run", "--resume", key, "--stages", "register", timeout=RUN_S)
    assert again.returncode == 0, again.stdout + again.stderr[-2000:]
    assert "[skipped] register" in again.stdout
    assert "not registered: the evaluation gate blocked this model (psnr " in again.stdout


def test_unknown_stage_is_a_usage_error(tmp_path):
    result = ffjobs_run(tmp_path, "--stages", "validate,deploy", timeout=COMMAND_S)
    assert result.returncode == 2
    assert "--stages: unknown stage deploy" in result.stderr
    assert "Traceback" not in result.stderr


def test_options_that_cannot_work_together_are_refused_before_any_stage(tmp_path):
    nodes = ffjobs_run(tmp_path, "--set", "slurm.nodes=2", timeout=COMMAND_S)
    assert nodes.returncode == 2 and "the local executor runs on this machine only" in nodes.stderr
    assert not (tmp_path / "runs").exists()  # nothing was created, nothing ran
    both = ffjobs_run(tmp_path, "--resume", "a-run", "--run-key", "b-run", timeout=COMMAND_S)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    config = ffjobs(tmp_path, "run", "--resume", "a-run", "--config", "local")
    assert config.returncode == 2 and "--set instead of --config" in config.stderr
    missing = ffjobs(tmp_path, "run", "--resume", "no-such-run")
    assert missing.returncode == 2 and "run no-such-run not found" in missing.stderr
    bad_key = ffjobs_run(tmp_path, "--run-key", "../escape", timeout=COMMAND_S)
    assert bad_key.returncode == 2 and "run key '../escape'" in bad_key.stderr
    assert not (tmp_path / "runs").exists()
