"""Configuration of the dataset: where it is, how it is validated, how it is fed to training."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class SynthConfig:
    """The synthetic face identity dataset used by the demo, tests and benchmarks."""

    identities: int = field(default=24, metadata={"ge": 2})
    per_identity: int = field(default=8, metadata={"ge": 2})
    size: int = field(default=64, metadata={"ge": 32, "le": 1024})
    seed: int = 0


@dataclass
class DataConfig:
    source: str = "runs/data/synthetic"
    """Dataset root: a local directory or ``s3://bucket/prefix``."""
    layout: Literal["auto", "identity_folders", "flat", "manifest"] = "auto"
    """How images map to identities; ``auto`` detects a manifest, then identity folders."""
    manifest: str | None = None
    """Manifest file (JSONL or CSV: path, identity, optional split), relative to ``source``."""
    synth: SynthConfig = field(default_factory=SynthConfig)
    val_fraction: float = field(default=0.2, metadata={"ge": 0.0, "lt": 1.0})
    """Fraction of identities held out for validation when the dataset has no split column."""
    same_identity_prob: float = field(default=0.5, metadata={"ge": 0.0, "le": 1.0})
    """Probability that a training pair is (source, target) of the same identity."""
    num_workers: int = field(default=0, metadata={"ge": 0})
    """DataLoader worker processes per rank."""
