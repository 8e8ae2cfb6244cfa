"""Configuration of evaluation on held-out identities and the promotion gate."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvaluateConfig:
    pairs: int = field(default=64, metadata={"ge": 1})
    """Held-out (source, target) pairs to score."""
    min_identity_cosine: float = field(default=0.0, metadata={"ge": -1.0, "le": 1.0})
    """Gate: the candidate must reach at least this identity similarity."""
