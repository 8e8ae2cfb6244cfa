"""Configuration of the face-fusion networks and their losses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PROJECT_TRAINING_ENCODER = "runs/models/identity.pt"
"""Where the embedded default keeps the training loss's encoder, pre-trained by ffjobs."""
PROJECT_EVALUATION_ENCODER = "runs/models/identity-eval.pt"
"""Where the evaluation's recogniser is pre-trained by ffjobs (``evaluate.identity_weights``'s
default)."""
PROJECT_ENCODERS = (PROJECT_TRAINING_ENCODER, PROJECT_EVALUATION_ENCODER)
"""Files only ffjobs writes (see :mod:`ffjobs.models.prepare`)."""


@dataclass
class LossWeights:
    """Weights of the generator's loss terms (the discriminator's hinge loss is unweighted)."""

    adversarial: float = field(default=1.0, metadata={"ge": 0.0})
    """Hinge adversarial term, averaged over discriminator scales."""
    identity: float = field(default=10.0, metadata={"ge": 0.0})
    """``1 - cosine`` between the identity embeddings of the fused output and the source."""
    reconstruction: float = field(default=10.0, metadata={"ge": 0.0})
    """L1 between fused output and target, on same-identity pairs only."""
    feature_matching: float = field(default=1.0, metadata={"ge": 0.0})
    """L1 between the last discriminator features of fused and real images."""


@dataclass
class ModelConfig:
    resolution: int = field(default=64, metadata={"ge": 64, "le": 512})
    """Square image size the generator works at (64 to 512, a multiple of 2^downsamplings)."""
    width: int = field(default=32, metadata={"ge": 8})
    """Channels after the generator's stem; doubles at each downsampling (capped at max_width)."""
    max_width: int = field(default=512, metadata={"ge": 8})
    """Upper bound of the generator's channel count."""
    downsamplings: int = field(default=2, metadata={"ge": 1, "le": 5})
    residual_blocks: int = field(default=2, metadata={"ge": 1})
    """Identity-injection (AdaIN) residual blocks in the generator's bottleneck."""
    padding: Literal["zeros", "reflect"] = "zeros"
    """Convolution padding in the generator. SimSwap uses ``reflect``; zero padding saves a
    memory-bound pass per convolution on GPU and is the default here."""
    upsampling: Literal["nearest", "bilinear", "transposed"] = "nearest"
    """Decoder upsampling: ``nearest`` + conv (cheapest), ``bilinear`` + conv (SimSwap), or a
    stride-2 transposed convolution."""
    generator_norm: Literal["instance", "none"] = "instance"
    """Normalisation in the generator's encoder and decoder. Per-sample (instance) statistics
    keep DDP with per-rank batches equivalent to one large batch; batch norm is not offered."""
    discriminator_width: int = field(default=32, metadata={"ge": 8})
    discriminator_scales: int = field(default=2, metadata={"ge": 1, "le": 3})
    discriminator_layers: int = field(default=3, metadata={"ge": 1, "le": 5})
    """Stride-2 convolutions per PatchGAN scale."""
    discriminator_norm: Literal["none", "instance"] = "none"
    """Normalisation in the discriminator; never batch norm (DDP equivalence, see docs)."""
    identity_arch: Literal["iresnet18", "iresnet34", "iresnet50", "iresnet100"] = "iresnet18"
    identity_width: float = field(default=0.25, metadata={"gt": 0.0, "le": 1.0})
    """Channel multiplier of the identity encoder; 1.0 is the arcface_torch layout (needed to
    load released weights), smaller values give the project's own quick CPU encoder."""
    identity_input_size: int = field(default=64, metadata={"ge": 32})
    """Side of the identity encoder's input; fused and source images are resized to it
    (arcface_torch: 112). A multiple of 16."""
    identity_weights: str | None = None
    """State dict file of the identity encoder (arcface_torch layout or ``ffjobs models
    train-identity`` output); none: randomly initialised (only useful for shape tests)."""
    identity_dim: int = field(default=128, metadata={"ge": 16})
    """Identity embedding size (arcface_torch: 512)."""
    losses: LossWeights = field(default_factory=LossWeights)

    def __post_init__(self) -> None:
        factor = 2**self.downsamplings
        if self.resolution % factor:
            raise ValueError(
                f"resolution: {self.resolution} is not divisible by 2^downsamplings = {factor}"
            )
        if self.identity_input_size % 16:
            raise ValueError(
                f"identity_input_size: must be a multiple of 16, got {self.identity_input_size}"
            )
