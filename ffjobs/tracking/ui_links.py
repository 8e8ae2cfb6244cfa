"""Where a person finds a run, a model version or an experiment: the one place that makes
MLflow UI links.

For a tracking server (``http(s)://``) a link is the UI page, opened in the model-training
view (``?workflowType=machine_learning``: MLflow 3 opens an experiment in its GenAI view,
traces and tokens, unless told otherwise). For a store without a UI of its own (``sqlite:``, a
folder) it is plain text naming the store and the id, never something that looks clickable. A
password in the tracking URI is redacted (a browser asks for it).
"""

from __future__ import annotations

from urllib.parse import quote

from ffjobs.config.tracking import TrackingConfig
from ffjobs.tracking.redact import redact_text

TRAINING_VIEW = "workflowType=machine_learning"
"""The MLflow UI's query parameter choosing the model-training view of an experiment (its
values: ``genai``, ``machine_learning``)."""


def is_link(text: str | None) -> bool:
    """Whether ``text`` is a web address a browser opens (a link, not a description)."""
    return bool(text) and str(text).startswith(("http://", "https://"))


def _server(tracking: TrackingConfig) -> str | None:
    uri = redact_text(tracking.tracking_uri.rstrip("/"))
    return uri if is_link(uri) else None


def experiment_link(tracking: TrackingConfig, experiment_id: str) -> str:
    """The experiment's runs in the model-training view."""
    server = _server(tracking)
    if server is None:
        return f"{redact_text(tracking.tracking_uri)} (experiment {experiment_id})"
    return f"{server}/#/experiments/{experiment_id}/runs?{TRAINING_VIEW}"


def run_link(
    tracking: TrackingConfig, run_id: str | None, experiment_id: str | None = None
) -> str | None:
    """The run's page (its experiment looked up when not given); None without a run."""
    if run_id is None or not tracking.enabled:
        return None
    server = _server(tracking)
    if server is None:
        return f"{redact_text(tracking.tracking_uri.rstrip('/'))} (run {run_id})"
    if experiment_id is None:
        try:
            from ffjobs.tracking.mlflow_logger import mlflow_client

            experiment_id = mlflow_client(tracking).get_run(run_id).info.experiment_id
        except Exception:  # the server is away: the run's id still finds it later
            return f"{server} (run {run_id})"
    return f"{server}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"


def model_version_link(tracking: TrackingConfig, name: str, version: str | int) -> str:
    """The registered model version's page."""
    server = _server(tracking)
    if server is None:
        return f"{redact_text(tracking.tracking_uri.rstrip('/'))} (model {name} version {version})"
    return f"{server}/#/models/{quote(name, safe='')}/versions/{version}"
