"""The ``evaluate:`` section: what the evaluation measures, with which recogniser, and the gate
a model must pass before review. It lives with the measurement (below :mod:`ffjobs.train`),
which reads it during training as the evaluate stage does at the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ffjobs.config.model import PROJECT_EVALUATION_ENCODER as DEFAULT_EVALUATION_ENCODER

METRICS = ("identity_top1", "identity_cosine", "psnr", "ssim", "pose_error", "fid")
"""What the evaluation can measure (pose error and FID only with the user's weights)."""


@dataclass
class GateConfig:
    """What a model must reach before it goes to review, and how it may compare to the champion.

    Each threshold is checked on the held-out identities; ``null`` leaves the check out,
    except for retrieval, which must then beat returning the target unchanged.
    """

    min_identity_top1: float | None = field(default=None, metadata={"ge": 0.0, "le": 1.0})
    """Identity retrieval top-1 the fused faces must reach; ``null``: above chance, i.e. at
    least the smallest rate that a one-sided exact binomial test on this set's number of pairs
    calls above chance (1 / held-out identities) at the 0.01 level: 0.375 for 40 pairs of 5
    identities, 0.275 for 200 (:func:`ffjobs.quality.significance.chance_floor`)."""
    min_identity_cosine: float | None = field(default=None, metadata={"ge": -1.0, "le": 1.0})
    """Mean cosine between the fused face's and the source's identity embeddings; ``null``:
    not checked (the report still gives it, and the target-unchanged value beside it)."""
    min_psnr: float | None = field(default=None, metadata={"ge": 0.0})
    """Self-swap reconstruction PSNR in dB (source == target)."""
    min_ssim: float | None = field(default=0.2, metadata={"ge": -1.0, "le": 1.0})
    """Self-swap reconstruction SSIM. An untrained generator scores below 0.1 on the
    synthetic faces, the 200-step demo about 0.3."""
    max_regression: float = field(default=0.0, metadata={"ge": 0.0})
    """How much worse than the registry's champion any compared metric may be, in that
    metric's own units (0: at least as good; the champion is evaluated now, on the same set)."""
    compare: list[str] = field(default_factory=lambda: list(METRICS))
    """Metrics that must not be worse than the champion's (those measured). Retrieval top-1
    moves in steps of one query (1 / pairs): on a set of a few pairs, leave it out."""

    def __post_init__(self) -> None:
        unknown = [name for name in self.compare if name not in METRICS]
        if unknown:
            raise ValueError(f"compare: unknown metric {unknown[0]!r}; known: {', '.join(METRICS)}")


@dataclass
class EvaluateConfig:
    """What ``ffjobs evaluate`` measures, with which encoder, and what the gate demands."""

    identity_arch: Literal["iresnet18", "iresnet34", "iresnet50", "iresnet100"] = "iresnet34"
    """Architecture of the recogniser that *measures* identity. It differs from the training
    loss's encoder (``model.identity_*``), as published face-swap protocols do, so a model is
    not graded by the network it was trained to please."""
    identity_width: float = field(default=0.25, metadata={"gt": 0.0, "le": 1.0})
    """Channel multiplier; 1.0 for arcface_torch weights."""
    identity_input_size: int = field(default=48, metadata={"ge": 32})
    """Side of the recogniser's input, a multiple of 16 (arcface_torch: 112)."""
    identity_dim: int = field(default=128, metadata={"ge": 16})
    """Embedding size (arcface_torch: 512)."""
    identity_weights: str = DEFAULT_EVALUATION_ENCODER
    """State dict of the recogniser: arcface_torch weights (width 1.0, input 112, dim 512), or
    at the default path the project's own, pre-trained on ``data.source`` when missing."""
    identity_seed: int = 1
    """Seed of that pre-training (another seed, architecture and input size than the
    training encoder's, so it is a different recogniser)."""
    seed: int = 0
    """Seed of the (source, target) pairing: the same model on the same set gives the same
    numbers."""
    max_pairs: int = field(default=1024, metadata={"ge": 2})
    """At most this many held-out images are evaluated (a seeded choice when there are more)."""
    batch_size: int = field(default=32, metadata={"ge": 1})
    every_steps: int = field(default=0, metadata={"ge": 0})
    """Measure the model on the held-out set every this many training steps as it trains
    (identity retrieval, identity cosine, PSNR, SSIM: ``heldout_*`` metrics and a progress
    line), so identity transfer is seen when it starts; 0: only at the end. Rank 0 measures
    while the other ranks wait: keep it to a few hundred pairs (``max_pairs``) on a big set."""
    samples: int = field(default=8, metadata={"ge": 1})
    """Pairs shown in ``samples.png``."""
    pose_weights: str | None = None
    """TorchScript pose regressor: images ``(N, 3, H, W)`` in [-1, 1] at the model's
    resolution -> ``(N, K)`` pose (e.g. yaw, pitch, roll); ``pose_error`` is the mean
    Euclidean distance between fused and target poses. ``null``: pose error is skipped."""
    fid_weights: str | None = None
    """TorchScript feature extractor: images ``(N, 3, H, W)`` in [-1, 1] -> ``(N, D)``
    features for the FID of fused faces against the held-out images. ``null``: FID is
    skipped (nothing is downloaded)."""
    gate: GateConfig = field(default_factory=GateConfig)

    def __post_init__(self) -> None:
        if self.identity_input_size % 16:
            raise ValueError(
                f"identity_input_size: must be a multiple of 16, got {self.identity_input_size}"
            )
