"""The gate's default floor on the demo's own evaluation set (5 held-out identities, 40 pairs:
above chance 0.2 from 15 right, 0.375): the generator as training starts it retrieves at
chance and is blocked; the demo's model, trained as ``make demo`` trains it, passes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train.helpers import place_local_encoders

from ffjobs.config import load_config
from ffjobs.evaluate.gate import decide
from ffjobs.models.factory import build_generator
from ffjobs.models.identity import build_identity_encoder
from ffjobs.models.swap import FaceSwap
from ffjobs.quality.encoder import load_evaluation_encoder
from ffjobs.quality.evalset import build_evaluation_set
from ffjobs.quality.measure import Extractors, measure
from ffjobs.quality.significance import versus_chance
from ffjobs.train.trainer import seed_everything

REPO = Path(__file__).resolve().parents[2]
RUN_S = 1200
"""The demo's run up to evaluation (validation, 300 steps on two ranks, evaluation): about
two and a half minutes on a quiet 2-core machine; room for a loaded one."""


@pytest.mark.slow
@pytest.mark.timeout(RUN_S + 120)  # the run, then one measurement of the untrained model
def test_the_gate_blocks_a_model_at_chance_and_passes_the_demos_model(tmp_path):
    place_local_encoders(tmp_path)  # pre-trained once per test run, as a first demo makes them
    done = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "run", "--config", str(REPO / "configs/local.yaml"),
         "--stages", "validate,train,evaluate", "--set", "tracking.enabled=false",
         "--set", "evaluate.every_steps=0", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=RUN_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "pre-training" not in done.stderr  # the encoders placed were made from this data
    stages = {s["name"]: s for s in json.loads(done.stdout)["stages"]}
    evaluation = stages["evaluate"]
    assert evaluation["status"] == "passed", evaluation["summary"]
    chance = evaluation["facts"]["identity_top1_vs_chance"]
    assert (chance["pairs"], chance["chance"], chance["floor"]) == (40, 0.2, 0.375)
    assert chance["distinguishable"] and "(above chance 0.2: " in evaluation["summary"]
    # the demo's set is the generator's: its ground-truth swaps are the reference the model's
    # scores are read against (a recogniser that tells the held-out identities apart)
    truth = evaluation["facts"]["ground_truth_swap"]
    assert truth["identity_top1"] > chance["floor"], truth
    assert 0 < truth["model_share"]["identity_top1"] <= 1.5, truth
    assert "held-out identities (a ground-truth swap: identity_top1 " in evaluation["summary"]

    with contextlib.chdir(tmp_path):  # the preset's relative paths: data, encoders
        config = load_config("local")
        evalset = build_evaluation_set(config)
        seed_everything(config.train.seed)  # the generator as training starts it
        untrained = FaceSwap(
            build_generator(config.model),
            build_identity_encoder(config.model),
            config.model.resolution,
        )
        encoder = load_evaluation_encoder(config)
        cpu = torch.device("cpu")
        found = measure(untrained, evalset, encoder, Extractors(), batch_size=32, device=cpu)
    metrics = found.metrics
    vs_chance = versus_chance(metrics["identity_top1"], found.pairs, evalset.identities)
    decision = decide(metrics, config.evaluate.gate, vs_chance=vs_chance, champion=None)
    assert not decision.passed
    assert decision.failures[0].startswith("identity_top1 "), decision.failures
    assert "< 0.375 (above chance 0.2: 40 pairs need 0.375" in decision.failures[0]
