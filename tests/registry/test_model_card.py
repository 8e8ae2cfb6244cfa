"""The model card and the end-of-run hint, from a run record alone (no MLflow, no torch)."""

from __future__ import annotations

import json

from ffjobs.config import load_config
from ffjobs.registry.model_card import DESCRIPTION_LIMIT, model_card
from ffjobs.registry.stage import review_hint
from ffjobs.runs.run import StageOutcome, create_run
from ffjobs.slurm.jobstate import JobState
from ffjobs.slurm.supervisor import AttemptRecord
from ffjobs.train.attempts import run_goodput

from .conftest import evaluate_outcome


def _run(tmp_path, *overrides):
    config = load_config(
        "local", ["tracking.enabled=false", f"runs_dir={tmp_path}", "slurm.gpus_per_node=8",
                  "slurm.nodes=2", "slurm.tasks_per_node=8", *overrides]
    )  # fmt: skip
    return create_run(config, echo=lambda _line: None)


def _attempt(number, job, summary, start, final, lost, seconds_lost, started) -> AttemptRecord:
    return AttemptRecord(
        number=number, job_id=job, nodes=("node1", "node2"), excluded=(),
        state=JobState.FAILED if lost else JobState.SUCCEEDED, exit_code=1 if lost else 0,
        kind=None, retryable=bool(lost), summary=summary, evidence=(), suspect_nodes=(),
        start_step=start, final_step=final, checkpoint_step=final, steps_lost=lost,
        seconds_lost=seconds_lost, started_at=started, ended_at=started + 100.0, first_step_s=None,
    )  # fmt: skip


def test_card_has_slurm_attempts_and_champion_deltas(tmp_path):
    run = _run(tmp_path)
    run.record["dataset_fingerprint"] = "ab" * 32
    run.record_outcome(StageOutcome("validate", "passed", 1.0, "192 images, 24 identities"))
    run.record_outcome(StageOutcome("preflight", "passed", 1.0, "PASS on 16 ranks (nccl)"))
    run.record_outcome(StageOutcome("train", "passed", 9.0, "steps -> 400 on SLURM"))
    attempts = [_attempt(1, "812", "failed: communicator failure", 0, 150, 100, 200.0, 10.0)]
    attempts.append(_attempt(2, "813", "succeeded (steps 150 -> 400)", 150, 400, 0, 0.0, 150.0))
    (run.stage_dir("train") / "attempts.jsonl").write_text(
        "".join(json.dumps(a.to_dict(), default=str) + "\n" for a in attempts)
    )
    champion = {
        "version": "4",
        "model_uri": "models:/ffjobs-face-swap/4",
        "metrics": {"identity_top1": 0.4, "psnr": 15.0},
        "deltas": {"identity_top1": 0.1},
    }
    run.record_outcome(evaluate_outcome(400, champion=champion))
    card = model_card(run, step=400, links={"mlflow_run": "http://mlflow/#/r", "airflow": None})

    assert f"fingerprint `{'ab' * 32}`" in card
    assert "- Ranks: 2 node(s) x 8 rank(s), 8 GPU(s) per node (local executor)" in card
    assert "- Preflight: passed: PASS on 16 ranks (nccl)" in card
    log = run.dir / "train" / "attempts.jsonl"
    assert f"- Attempts: 2, goodput {run_goodput(run):.1%} (attempt log `{log}`)" in card
    assert "  - 1: 812 failed: communicator failure\n  - 2: 813 succeeded" in card
    assert "- Champion compared: 4" in card
    assert "| identity_top1 | 0.5 | 0.4 | +0.1 (better) |" in card  # the evaluation's delta
    assert "| psnr | 14.2 | 15 | -0.8 (worse) |" in card  # computed when not given
    assert "- MLflow run: <http://mlflow/#/r>" in card and "Airflow" not in card  # a link


def test_card_table_is_readable_with_intervals_chance_and_skipped_on_one_line(tmp_path):
    run = _run(tmp_path)
    outcome = evaluate_outcome(4)
    outcome.facts["metrics"]["psnr"] = 14.234567891234567
    outcome.facts["skipped"] = {
        "pose_error": "skipped: set evaluate.pose_weights to a TorchScript head pose regressor",
        "fid": "skipped: set evaluate.fid_weights to a TorchScript feature extractor",
    }
    outcome.facts["intervals"] = {"psnr": [13.91234, 14.5555555]}
    outcome.facts["interval_level"] = 0.95
    run.record_outcome(outcome)
    card = model_card(run, step=4, links={"mlflow_run": "sqlite:///runs/mlflow.db (run r)"})

    assert "| metric | this model [95% interval] | champion | change |" in card
    assert "| psnr | 14.2 [13.9, 14.6] | - | - |" in card  # 3 significant digits
    assert "| ssim | 0.31 | - | - |" in card  # no interval reported: the value alone
    assert "- Chance level of identity_top1: 0.25 (1 of 4 held-out identities)" in card
    assert (
        "- Not measured: pose_error (set `evaluate.pose_weights`), fid (set `evaluate.fid_weights`)"
        in card
    )
    assert "skipped: skipped" not in card and "| fid" not in card
    assert "- MLflow run: sqlite:///runs/mlflow.db (run r)" in card  # text, not a link
    assert card.count("Review state: **pending review** (alias `challenger`).") == 1
    assert "not distinguishable from chance" not in card  # the report says nothing of it


def test_card_says_when_retrieval_is_not_distinguishable_from_chance(tmp_path):
    run = _run(tmp_path)
    outcome = evaluate_outcome(4)
    outcome.facts["identity_top1_vs_chance"] = {
        "chance": 0.25, "alpha": 0.01, "floor": 0.5, "p_value": 0.4, "distinguishable": False,
    }  # fmt: skip
    run.record_outcome(outcome)
    card = model_card(run, step=4, links={})
    assert (
        "- identity_top1 is **not distinguishable from chance**: above chance at the 0.01 level "
        "needs 0.5" in card
    )


def test_card_fits_the_registry_column(tmp_path):
    run = _run(tmp_path)
    outcome = evaluate_outcome(4)
    outcome.facts["gate"]["reasons"] = [f"check {i}: " + "x" * 80 for i in range(200)]
    run.record_outcome(outcome)
    card = model_card(run, step=4, links={})
    assert len(card) <= DESCRIPTION_LIMIT
    assert card.endswith("the whole card is the run's artifact register/model_card.md)\n")


def test_review_hint_names_the_store_and_the_next_commands(tmp_path):
    run = _run(tmp_path, "tracking.tracking_uri=http://mlflow:5000")
    facts = {
        "name": "m",
        "version": "3",
        "model_uri": "models:/m/3",
        "link": "http://mlflow:5000/#/models/m/versions/3",
    }
    lines = review_hint(facts, run.config)
    assert lines[0] == (
        "model m version 3 is the challenger, pending review: "
        "http://mlflow:5000/#/models/m/versions/3"
    )
    store = "--set tracking.tracking_uri=http://mlflow:5000"
    assert any(f"ffjobs registry list m {store}" in line for line in lines)
    assert any(f'ffjobs registry approve m 3 --reason "..." {store}' in line for line in lines)
    assert any("ffjobs swap --model models:/m/3 " in line for line in lines)
    local = review_hint(facts, load_config("local"))  # the default store needs no --set
    assert "mlflow ui --backend-store-uri sqlite:///runs/mlflow.db" in local[0]
    assert all("--set" not in line for line in local)
