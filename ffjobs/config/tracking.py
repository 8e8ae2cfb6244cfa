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
    review_timeout_h: float = field(default=72.0, metadata={"ge": 0.0})
    """Hours the pipeline's review task waits for a reviewer's answer in Airflow; past them
    nothing is decided (the version stays the challenger for ``ffjobs registry``) and the task
    fails. 0: the DAG run asks no one (the review task is skipped)."""
