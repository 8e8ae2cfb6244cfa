"""The evaluation measured during training, every ``evaluate.every_steps`` steps, by rank 0.

The same measurement as the evaluate stage (:mod:`ffjobs.quality`): the weights a checkpoint
would hand on (the EMA generator, else a copy of the generator) swap the held-out identities'
fixed pairs, and the evaluation recogniser scores them. Logged as ``heldout_*`` metrics at the
training step (the evaluate stage's own ``eval_*`` are the final model's), and printed as one
line with identity retrieval's interval and the level chance would reach, so a reviewer sees
when identity transfer starts.

It draws no random number from training's streams (it runs under a forked RNG), so a run
measured on the way trains exactly as one that is not; the other ranks wait for rank 0 at the
next step's all-reduce, for as long as one measurement takes (seconds on the demo's set). It
never pre-trains the recogniser in the middle of training (the train stage makes it before
any rank starts): without it, or without a held-out set, it says so once and measures nothing.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import torch
from torch import nn

from ffjobs.config import Config
from ffjobs.errors import UserError
from ffjobs.models.swap import FaceSwap
from ffjobs.quality.encoder import build_recogniser
from ffjobs.quality.evalset import EvaluationSet, build_evaluation_set
from ffjobs.quality.measure import Extractors, measure
from ffjobs.quality.significance import describe_metrics, versus_chance, wilson_interval
from ffjobs.train.distributed import print0

METRICS = ("identity_top1", "identity_cosine", "psnr", "ssim")
"""What is measured on the way (pose error and FID, which need the user's networks, are left to
the evaluate stage)."""


class TrainingProbe:
    """Rank 0's measurement of the model in training; built once, the set and recogniser loaded
    at the first measurement."""

    def __init__(self, config: Config, device: torch.device, quarantine: str | None = None):
        self.config, self.device, self.quarantine = config, device, quarantine
        self.every = config.evaluate.every_steps
        self._evalset: EvaluationSet | None = None
        self._recogniser: nn.Module | None = None

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def measure(self, generator: nn.Module, identity_encoder: nn.Module) -> dict[str, float]:
        """``heldout_<metric>`` of ``generator`` (not changed: a copy is measured, in eval
        mode) with its frozen ``identity_encoder``; empty when nothing can be measured. Loading
        the set and building the recogniser draw random numbers too: all of it runs aside."""
        python_state = random.getstate()
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                if self._evalset is None and not self._load():
                    return {}
                model = FaceSwap(
                    copy.deepcopy(generator), identity_encoder, self.config.model.resolution
                )
                found = measure(
                    model,
                    self._evalset,
                    self._recogniser,
                    Extractors(),
                    batch_size=self.config.evaluate.batch_size,
                    device=self.device,
                )
        finally:
            random.setstate(python_state)
        return {f"heldout_{name}": found.metrics[name] for name in METRICS}

    def _load(self) -> bool:
        """The held-out set and the recogniser, loaded once; False (said once, and no more
        measurements) when either is missing."""
        weights = Path(self.config.evaluate.identity_weights)
        try:
            if not weights.exists():
                raise UserError(
                    f"evaluate.identity_weights: {weights} not there (the train stage makes the "
                    "project's own before training)"
                )
            self._evalset = build_evaluation_set(self.config, self.quarantine)
            self._recogniser = build_recogniser(self.config)
        except UserError as exc:
            print0(f"no held-out measurement during training (evaluate.every_steps): {exc}")
            self.every = 0
            return False
        return True

    def line(self, step: int, metrics: dict[str, float]) -> str:
        """The progress line of one measurement."""
        evalset = self._evalset
        assert evalset is not None, "measure first"
        pairs, identities = len(evalset.targets), evalset.identities
        measured = {name: metrics[f"heldout_{name}"] for name in METRICS}
        top1 = measured["identity_top1"]
        described = describe_metrics(
            measured,
            {"identity_top1": wilson_interval(top1, pairs)},
            versus_chance(top1, pairs, identities),
        )
        return f"held-out at step {step}: {described}; {identities} held-out identities"
