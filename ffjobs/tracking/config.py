"""Configuration of experiment tracking and the model registry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrackingConfig:
    enabled: bool = True
    tracking_uri: str = "sqlite:///runs/mlflow.db"
    """MLflow tracking URI: ``http://host:port`` for a server, ``sqlite:///...`` locally."""
    artifact_location: str | None = None
    experiment: str = "ffjobs"


@dataclass
class RegistryConfig:
    """Where trained models go for review: a registered model in the MLflow model registry."""

    model_name: str = "ffjobs-face-swap"
    """Registered model name; its alias ``champion`` is the approved model, ``challenger``
    the newest candidate awaiting review."""
