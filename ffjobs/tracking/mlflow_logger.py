"""MLflow runs with one owner: the process that starts a pipeline run creates its MLflow run
and ends it; every other process (training rank 0, a later Airflow task) attaches by the id it
is handed and only logs into it.

Everything goes through ``MlflowClient`` with an explicit run id, never through MLflow's
process-global "active run", so attaching can never end or re-open a run by accident.
MLflow is imported lazily, so the GPU image (no MLflow) still trains.

A :class:`RunLogger` never talks to the server on the caller's thread: it appends each record
to its spool in the run directory (:mod:`ffjobs.tracking.spool`) and a background thread ships
it (:mod:`ffjobs.tracking.shipper`). An outage costs a training step nothing, warns once and
loses nothing: whatever a process could not deliver is delivered by the next one that tries
(the owner before it ends the run, ``ffjobs runs show``, the next stage). Params, tags, files
and the dataset go the same way as metrics; all of it is redacted on the way out
(:mod:`ffjobs.tracking.redact`).

MLflow's HTTP client would retry a failed call for minutes; ffjobs retries by itself (the
spool), so unless set otherwise a call fails after :data:`HTTP_RETRIES` retries and
:data:`HTTP_TIMEOUT_S` of silence.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ffjobs.config.tracking import TrackingConfig
from ffjobs.tracking.delivery import deliver, deliver_run
from ffjobs.tracking.redact import redact_mapping, redact_text
from ffjobs.tracking.shipper import Shipper, TrackingWarning, Unavailable
from ffjobs.tracking.spool import SPOOL_DIR, Spool, logged_steps, writer_name

__all__ = [
    "RunLogger",
    "TrackingWarning",
    "deliver_pending",
    "end_run",
    "environment_tags",
    "flatten",
    "mlflow_client",
    "reopen_run",
    "start_run",
    "tracking_dir",
]

HTTP_RETRIES = 2
HTTP_TIMEOUT_S = 30
"""MLflow HTTP retries and socket timeout in ffjobs processes (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
and ``MLFLOW_HTTP_REQUEST_TIMEOUT`` win when set)."""
FLUSH_TIMEOUT_S = 30.0
"""How long a process waits at its end for its spool to go out before leaving it to the owner."""


AIRFLOW_TAGS = {"airflow.dag_id": "AIRFLOW_CTX_DAG_ID", "airflow.run_id": "AIRFLOW_CTX_DAG_RUN_ID"}
"""Tags linking a run to the Airflow DAG run it was started in, from the variables Airflow sets
for a task's process (and its subprocesses: an ``ffjobs`` command in a task)."""


def environment_tags(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """:data:`AIRFLOW_TAGS` whose variables are set in ``environ`` (default: this process's)."""
    environ = os.environ if environ is None else environ
    return {tag: environ[name] for tag, name in AIRFLOW_TAGS.items() if environ.get(name)}


def tracking_dir(run_dir: str | Path) -> Path:
    """Where a run's spools are: ``<run dir>/tracking``."""
    return Path(run_dir) / SPOOL_DIR


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


def mlflow_client(tracking: TrackingConfig):
    """An ``MlflowClient`` for ``tracking.tracking_uri`` (its registry too), quiet on stdout."""
    # MLflow prints "View run ... at: <url>" on stdout when a run on a server ends; stdout is
    # the --json document's, and ffjobs prints the run's link itself
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(HTTP_RETRIES))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
    from mlflow.tracking import MlflowClient

    ensure_sqlite_store(tracking.tracking_uri)
    return MlflowClient(tracking_uri=tracking.tracking_uri)


def start_run(
    tracking: TrackingConfig, run_name: str, tags: Mapping[str, str] | None = None
) -> str | None:
    """Create the MLflow run of a new pipeline run (the owner's call); return its id.

    The params (the resolved config) follow through the run's :class:`RunLogger`. ``None``
    when tracking is disabled or the tracking server cannot be reached (with one warning).
    """
    if not tracking.enabled:
        return None
    try:
        client = mlflow_client(tracking)
        experiment_id = _experiment_id(client, tracking)
        run = client.create_run(experiment_id, run_name=run_name, tags=redact_mapping(tags or {}))
        return run.info.run_id
    except Exception as exc:  # tracking must never take the work down
        _warn(
            f"cannot start an MLflow run at {tracking.tracking_uri}: {exc}; what the run logs is "
            "spooled in its run directory and delivered once the server answers",
            spooling=True,
        )
        return None


def _experiment_id(client, tracking: TrackingConfig) -> str:
    """The id of ``tracking.experiment``, created if missing; one another process created
    meanwhile (two runs started together) is used."""
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(
            tracking.experiment, artifact_location=artifact_location(tracking)
        )
    except Exception:
        experiment = client.get_experiment_by_name(tracking.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


def artifact_location(tracking: TrackingConfig) -> str | None:
    """Where a new experiment keeps its artifacts: ``tracking.artifact_location`` if set; for a
    sqlite store, ``mlartifacts/`` beside its database (``runs/mlartifacts`` for the local
    profile's ``runs/mlflow.db``, not MLflow's ``./mlruns`` in whatever folder a process starts
    in); a server's own default otherwise (None)."""
    if tracking.artifact_location:
        return tracking.artifact_location
    prefix = "sqlite:///"
    if tracking.tracking_uri.startswith(prefix):
        database = Path(tracking.tracking_uri.removeprefix(prefix))
        return str(database.parent.resolve() / "mlartifacts")
    return None


def reopen_run(tracking: TrackingConfig, run_id: str) -> bool:
    """Mark an ended run as running again (the owner resuming it); False if that failed."""
    if not tracking.enabled:
        return False
    try:
        mlflow_client(tracking).update_run(run_id, status="RUNNING")
        return True
    except Exception as exc:
        _warn(f"cannot reopen MLflow run {run_id} at {tracking.tracking_uri}: {exc}")
        return False


def deliver_pending(tracking: TrackingConfig, run_id: str | None, run_dir: str | Path) -> int:
    """Send what any writer of the run left undelivered in its spool (the owner's call, and
    ``ffjobs runs show``'s); return how many records are still pending (0: all delivered).

    An unreachable server is one warning; the records stay for the next try.
    """
    directory = tracking_dir(run_dir)
    if not tracking.enabled or run_id is None or not directory.is_dir():
        return 0
    try:
        client = mlflow_client(tracking)
        _, left = deliver_run(client, run_id, directory)
        return left
    except Exception as exc:
        from ffjobs.tracking.spool import run_spools

        left = sum(len(spool.pending()) for spool in run_spools(directory))
        _warn(
            f"delivering {left} spooled record(s) of {run_dir} to {tracking.tracking_uri} "
            f"failed: {exc}; they stay in {directory} for the next try"
        )
        return left


def end_run(tracking: TrackingConfig, run_id: str | None, status: str = "FINISHED") -> None:
    """End the run (the owner's call): ``FINISHED``, ``FAILED`` or ``KILLED``."""
    if not tracking.enabled or run_id is None:
        return
    try:
        mlflow_client(tracking).set_terminated(run_id, status=status)
    except Exception as exc:
        _warn(f"ending MLflow run {run_id} at {tracking.tracking_uri} failed: {exc}")


class RunLogger:
    """Logs metrics, params, tags, files and the dataset into one existing MLflow run, by id.

    It never starts or ends the run: that is its owner's business. Each call appends to this
    process's spool in ``spool_dir`` (the run's :func:`tracking_dir`) and returns; a background
    thread delivers. With ``run_id=None`` (the server was down when the run was created) it
    still spools, and the owner delivers once it has created the MLflow run. With tracking off
    or ``spool_dir=None`` (a rank other than 0) every method is a no-op.

    A metric's steps only go forward within a run: a step at or below the highest one any
    writer of the run already logged for that metric (an earlier attempt that failed after its
    last checkpoint, whose steps a retry trains again) is not logged a second time; the first
    attempt's value stands.
    """

    def __init__(
        self,
        tracking: TrackingConfig,
        run_id: str | None,
        spool_dir: str | Path | None,
        *,
        role: str = "owner",
    ):
        self.tracking = tracking
        self.enabled = tracking.enabled and spool_dir is not None
        self.run_id = run_id if self.enabled else None
        self.spool_dir = Path(spool_dir) if spool_dir is not None else None
        self._role = role
        self._spool: Spool | None = None
        self._shipper: Shipper | None = None
        self._highest: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._client: Any = None

    @property
    def active(self) -> bool:
        """Whether calls record anything (into the spool; delivered when there is a run id)."""
        return self.enabled

    @property
    def spool(self) -> Spool | None:
        return self._spool

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if not self.enabled or not metrics:
            return
        with self._lock:
            if self._highest is None:
                self._highest = logged_steps(self.spool_dir)
            values = {
                key: float(value)
                for key, value in metrics.items()
                if step > self._highest.get(key, step - 1)
            }
            for key in values:
                self._highest[key] = step
        if values:
            now = int(time.time() * 1000)
            self._record({"kind": "metrics", "step": int(step), "timestamp": now, "values": values})

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Params, flattened (``{"train": {"lr": 1}}`` -> ``train.lr``); values as strings."""
        if not self.enabled or not params:
            return
        flat = {key: "" if value is None else str(value) for key, value in flatten(params).items()}
        self._record({"kind": "params", "params": flat})

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if not self.enabled or not tags:
            return
        self._record({"kind": "tags", "tags": {key: str(value) for key, value in tags.items()}})

    def log_artifacts(self, paths: list[str], artifact_path: str | None = None) -> None:
        """Upload files (reports, plots) into the run, under ``artifact_path``."""
        if not self.enabled or not paths:
            return
        absolute = [str(Path(path).resolve()) for path in paths]
        self._record({"kind": "artifacts", "paths": absolute, "artifact_path": artifact_path})

    def log_dataset(
        self,
        name: str,
        digest: str,
        source: str,
        profile: Mapping[str, Any],
        context: str = "training",
    ) -> None:
        """The dataset the run uses, as an MLflow dataset input (``context`` is its tag)."""
        if not self.enabled:
            return
        source_type = "s3" if source.startswith("s3://") else "local"
        self._record(
            {
                "kind": "dataset",
                "name": name,
                "digest": digest,
                "source": source,
                "source_type": source_type,
                "profile": dict(profile),
                "context": context,
            }
        )

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait (at most ``timeout_s``) for what was logged to reach the server; False if some
        of it is still only in the spool (an outage)."""
        return self._shipper.flush(timeout_s) if self._shipper is not None else True

    def close(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """A last delivery attempt; what stays undelivered waits in the spool for the owner."""
        if self._shipper is not None:
            self._shipper.close(timeout_s)

    def _record(self, record: dict[str, Any]) -> None:
        if self._spool is None:
            self._spool = Spool.for_writer(self.spool_dir, writer_name(self._role))
            if self.run_id is not None:  # else nothing to ship to yet: the owner delivers
                where = redact_text(self.tracking.tracking_uri)
                self._shipper = Shipper(self._deliver, where, str(self._spool.path))
        self._spool.append(record)
        if self._shipper is not None:
            self._shipper.nudge()

    def _deliver(self) -> int:
        if self._client is None:
            try:
                self._client = mlflow_client(self.tracking)
            except ImportError as exc:
                raise Unavailable(f"MLflow is not importable here ({exc})") from None
        sent, _ = deliver(self._client, self.run_id, self._spool)
        return sent


def _warn(reason: str, *, spooling: bool = False) -> None:
    import warnings

    tail = "" if spooling else "; the work goes on"
    message = redact_text(f"{reason}{tail} (set tracking.enabled=false to silence)")
    warnings.warn(message, TrackingWarning, stacklevel=3)


def sqlite_store_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI (None for any other URI, or an
    in-memory database)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def ensure_sqlite_store(uri: str) -> None:
    """Make a ``sqlite:///`` tracking URI's database if it is missing: its folder, MLflow's
    tables and default experiment, made once however many processes ask at the same time
    (written aside under a lock, then renamed into place: :func:`ffjobs.shared_inputs.make_once`).

    MLflow creates the tables of an empty database on first connect; two processes doing so
    at once fail ("table ... already exists"), and one of them then has no MLflow run.
    """
    path = sqlite_store_path(uri)
    if path is None or path.exists():
        return
    from ffjobs.shared_inputs import make_once

    path.parent.mkdir(parents=True, exist_ok=True)
    make_once(path, _make_sqlite_store, what="the MLflow store")


def _make_sqlite_store(path: Path) -> None:
    """MLflow's schema and default experiment in a new SQLite file at ``path``, its
    connections closed (the file is renamed next). MLflow's lines about creating tables are
    left out: the file is new, there is nothing to report."""
    import logging

    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    uri = f"sqlite:///{path}"
    loggers = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        store = _get_sqlalchemy_store(uri, None)  # the store class MlflowClient would use
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    store.engine.dispose()
    getattr(type(store), "_engine_map", {}).pop(uri, None)
