"""Configuration of the face-fusion networks and their losses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class LossWeights:
    adversarial: float = field(default=1.0, metadata={"ge": 0.0})
    identity: float = field(default=10.0, metadata={"ge": 0.0})
    reconstruction: float = field(default=10.0, metadata={"ge": 0.0})
    feature_matching: float = field(default=1.0, metadata={"ge": 0.0})


@dataclass
class ModelConfig:
    resolution: int = field(default=64, metadata={"ge": 64, "le": 512})
    """Square image size the generator works at (64 to 512)."""
    width: int = field(default=32, metadata={"ge": 8})
    """Channels after the generator's stem; doubles at each downsampling."""
    downsamplings: int = field(default=2, metadata={"ge": 1, "le": 5})
    residual_blocks: int = field(default=2, metadata={"ge": 1})
    """Identity-injection (AdaIN) residual blocks in the generator's bottleneck."""
    discriminator_width: int = field(default=32, metadata={"ge": 8})
    discriminator_scales: int = field(default=2, metadata={"ge": 1, "le": 3})
    identity_arch: Literal["iresnet18", "iresnet34", "iresnet50", "iresnet100"] = "iresnet18"
    identity_weights: str | None = None
    """User-supplied arcface_torch-compatible state_dict; none: the project's own encoder."""
    identity_dim: int = field(default=512, metadata={"ge": 16})
    losses: LossWeights = field(default_factory=LossWeights)
