"""Rank-0 MLflow logging for training: one run per training job, continued across restarts.

MLflow is imported here, lazily, so the GPU image (no MLflow) still trains. If tracking is
disabled the logger is a no-op; if MLflow is missing or the server fails, training goes on and
the logger warns once, naming the cause, then stops trying.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ffjobs.tracking.config import TrackingConfig

RUN_ID_ENV = "FFJOBS_MLFLOW_RUN_ID"
"""A run id handed down by the pipeline: training logs into that run instead of a new one."""


class TrackingWarning(UserWarning):
    """Tracking failed; training continues without it."""


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, dotted))
        else:
            flat[dotted] = value
    return flat


class RunLogger:
    """Logs params and metrics to one MLflow run; every method is safe to call on any rank."""

    def __init__(self, config: TrackingConfig, active: bool):
        self.config = config
        self.active = active and config.enabled
        self.run_id: str | None = None
        self._mlflow: Any = None

    def start(self, run_name: str, params: Mapping[str, Any], run_id: str | None = None) -> None:
        """Start (or, with ``run_id``, resume) the run and log the flattened config as params."""
        if not self.active:
            return
        try:
            import mlflow

            _ensure_sqlite_parent(self.config.tracking_uri)
            mlflow.set_tracking_uri(self.config.tracking_uri)
            run_id = run_id or os.environ.get(RUN_ID_ENV)
            if run_id is None:
                experiment = mlflow.get_experiment_by_name(self.config.experiment)
                experiment_id = (
                    experiment.experiment_id
                    if experiment is not None
                    else mlflow.create_experiment(
                        self.config.experiment, artifact_location=self.config.artifact_location
                    )
                )
                run = mlflow.start_run(experiment_id=experiment_id, run_name=run_name)
                flat = {k: str(v)[:500] for k, v in flatten(params).items()}
                items = list(flat.items())
                for i in range(0, len(items), 100):  # MLflow's per-batch param limit
                    mlflow.log_params(dict(items[i : i + 100]))
            else:
                run = mlflow.start_run(run_id=run_id)
            self.run_id = run.info.run_id
            self._mlflow = mlflow
        except Exception as exc:  # tracking must never take training down
            self._disable(f"cannot start MLflow run at {self.config.tracking_uri}: {exc}")

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if self._mlflow is None:
            return
        try:
            clean = {k.replace("/", "_"): float(v) for k, v in metrics.items()}
            self._mlflow.log_metrics(clean, step=step)
        except Exception as exc:
            self._disable(f"logging metrics to {self.config.tracking_uri} failed: {exc}")

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if self._mlflow is None:
            return
        try:
            self._mlflow.set_tags(dict(tags))
        except Exception as exc:
            self._disable(f"setting tags on {self.config.tracking_uri} failed: {exc}")

    def log_artifacts(self, paths: list[str], artifact_path: str | None = None) -> None:
        """Upload files (reports, plots) into the run, under ``artifact_path``."""
        if self._mlflow is None:
            return
        try:
            for path in paths:
                self._mlflow.log_artifact(path, artifact_path=artifact_path)
        except Exception as exc:
            self._disable(f"uploading artifacts to {self.config.tracking_uri} failed: {exc}")

    def finish(self, status: str = "FINISHED") -> None:
        """End the run (``FAILED``/``KILLED`` on errors)."""
        if self._mlflow is None:
            return
        try:
            self._mlflow.end_run(status=status)
        except Exception as exc:
            self._disable(f"ending the MLflow run failed: {exc}")
        self._mlflow = None

    def _disable(self, reason: str) -> None:
        warnings.warn(
            f"{reason}; training continues without tracking (set tracking.enabled=false to "
            "silence)",
            TrackingWarning,
            stacklevel=3,
        )
        self.active = False
        self._mlflow = None


def _ensure_sqlite_parent(uri: str) -> None:
    """``sqlite:///runs/mlflow.db`` fails if ``runs/`` does not exist yet."""
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
