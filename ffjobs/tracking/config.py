"""Configuration of experiment tracking and the model registry."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrackingConfig:
    enabled: bool = True
    tracking_uri: str = "sqlite:///runs/mlflow.db"
    """MLflow tracking URI: ``http://host:port`` for a server, ``sqlite:///...`` locally."""
    artifact_location: str | None = None
    experiment: str = "ffjobs"
    system_metrics_interval_s: float = field(default=10.0, metadata={"ge": 0.0})
    """Seconds between samples of each training node's CPU, memory and GPUs
    (``system/<node>/...``); 0: not sampled."""


@dataclass
class RegistryConfig:
    """Where trained models go for review: a registered model in the MLflow model registry."""

    model_name: str = "ffjobs-face-swap"
    """Registered model name; its alias ``champion`` is the approved model, ``challenger``
    the newest candidate awaiting review."""
