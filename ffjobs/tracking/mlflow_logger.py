"""MLflow runs with one owner: the process that starts a pipeline run creates its MLflow run
and ends it; every other process (training rank 0, a later Airflow task) attaches by the id it
is handed and only logs into it.

Everything goes through ``MlflowClient`` with an explicit run id, never through MLflow's
process-global "active run", so attaching can never end or re-open a run by accident.
MLflow is imported lazily, so the GPU image (no MLflow) still trains. If tracking is disabled
the functions are no-ops; if MLflow is missing or the server fails, the work goes on and the
logger warns once, naming the cause, then stops trying.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ffjobs.tracking.config import TrackingConfig

PARAM_BATCH = 100
"""MLflow's limit of params per ``log_batch`` call."""
PARAM_VALUE_LIMIT = 500


class TrackingWarning(UserWarning):
    """Tracking failed; the work continues without it."""


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


def _client(tracking: TrackingConfig):
    # MLflow prints "View run ... at: <url>" on stdout when a run on a server ends; stdout is
    # the --json document's, and ffjobs prints the run's link itself
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow.tracking import MlflowClient

    _ensure_sqlite_parent(tracking.tracking_uri)
    return MlflowClient(tracking_uri=tracking.tracking_uri)


def start_run(
    tracking: TrackingConfig,
    run_name: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str] | None = None,
) -> str | None:
    """Create the MLflow run of a new pipeline run (the owner's call); return its id.

    ``params`` (the resolved config) are logged flattened. ``None`` when tracking is disabled
    or the tracking server cannot be reached (with one warning).
    """
    if not tracking.enabled:
        return None
    try:
        from mlflow.entities import Param, RunTag

        client = _client(tracking)
        experiment = client.get_experiment_by_name(tracking.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else client.create_experiment(
                tracking.experiment, artifact_location=tracking.artifact_location
            )
        )
        run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags or {}))
        flat = [
            Param(key, str(value)[:PARAM_VALUE_LIMIT]) for key, value in flatten(params).items()
        ]
        for i in range(0, len(flat), PARAM_BATCH):
            client.log_batch(run.info.run_id, params=flat[i : i + PARAM_BATCH])
        if tags:
            client.log_batch(run.info.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        return run.info.run_id
    except Exception as exc:  # tracking must never take the work down
        _warn(f"cannot start an MLflow run at {tracking.tracking_uri}: {exc}")
        return None


def reopen_run(tracking: TrackingConfig, run_id: str) -> bool:
    """Mark an ended run as running again (the owner resuming it); False if that failed."""
    if not tracking.enabled:
        return False
    try:
        _client(tracking).update_run(run_id, status="RUNNING")
        return True
    except Exception as exc:
        _warn(f"cannot reopen MLflow run {run_id} at {tracking.tracking_uri}: {exc}")
        return False


def end_run(tracking: TrackingConfig, run_id: str | None, status: str = "FINISHED") -> None:
    """End the run (the owner's call): ``FINISHED``, ``FAILED`` or ``KILLED``."""
    if not tracking.enabled or run_id is None:
        return
    try:
        _client(tracking).set_terminated(run_id, status=status)
    except Exception as exc:
        _warn(f"ending MLflow run {run_id} at {tracking.tracking_uri} failed: {exc}")


def run_link(tracking: TrackingConfig, run_id: str | None) -> str | None:
    """Where a person finds the run: the UI page for a server, else the store and id."""
    if run_id is None or not tracking.enabled:
        return None
    uri = tracking.tracking_uri.rstrip("/")
    if uri.startswith(("http://", "https://")):
        try:
            experiment_id = _client(tracking).get_run(run_id).info.experiment_id
            return f"{uri}/#/experiments/{experiment_id}/runs/{run_id}"
        except Exception:
            return f"{uri} (run {run_id})"
    return f"{uri} (run {run_id})"


class RunLogger:
    """Logs metrics, tags and artifacts into one existing MLflow run, by id.

    It never starts or ends the run: that is its owner's business. With ``run_id=None``
    (tracking off, a rank other than 0, or no run to attach to) every method is a no-op.
    """

    def __init__(self, tracking: TrackingConfig, run_id: str | None):
        self.tracking = tracking
        self.run_id = run_id if tracking.enabled else None
        self._client: Any = None

    @property
    def active(self) -> bool:
        return self.run_id is not None

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = _client(self.tracking)
        return self._client

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if self.run_id is None:
            return
        try:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            batch = [
                Metric(key.replace("/", "_"), float(value), now, step)
                for key, value in metrics.items()
            ]
            self._get_client().log_batch(self.run_id, metrics=batch)
        except Exception as exc:
            self._disable(f"logging metrics to {self.tracking.tracking_uri} failed: {exc}")

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if self.run_id is None or not tags:
            return
        try:
            from mlflow.entities import RunTag

            batch = [RunTag(key, str(value)) for key, value in tags.items()]
            self._get_client().log_batch(self.run_id, tags=batch)
        except Exception as exc:
            self._disable(f"setting tags on {self.tracking.tracking_uri} failed: {exc}")

    def log_artifacts(self, paths: list[str], artifact_path: str | None = None) -> None:
        """Upload files (reports, plots) into the run, under ``artifact_path``."""
        if self.run_id is None:
            return
        try:
            for path in paths:
                self._get_client().log_artifact(self.run_id, path, artifact_path=artifact_path)
        except Exception as exc:
            self._disable(f"uploading artifacts to {self.tracking.tracking_uri} failed: {exc}")

    def _disable(self, reason: str) -> None:
        _warn(reason)
        self.run_id = None


def _warn(reason: str) -> None:
    warnings.warn(
        f"{reason}; continuing without tracking (set tracking.enabled=false to silence)",
        TrackingWarning,
        stacklevel=3,
    )


def _ensure_sqlite_parent(uri: str) -> None:
    """``sqlite:///runs/mlflow.db`` fails if ``runs/`` does not exist yet."""
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
