"""Configuration of the evaluation and of the gate a model must pass before review."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EvaluateConfig:
    """What ``ffjobs evaluate`` measures, with which encoder, and what the gate demands."""
