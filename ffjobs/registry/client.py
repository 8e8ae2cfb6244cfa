"""The MLflow model registry as the review uses it: aliases and tags only (no stages).

A version's review state is its tag ``validation_status`` (``pending_review``, ``approved``,
``rejected``); the alias ``champion`` names the approved model in use and ``challenger`` the
newest candidate awaiting review. Lookups that can fail because of what a user typed (a model
or version that does not exist) raise a one-line :class:`UserError` naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from ffjobs.config.tracking import TrackingConfig
from ffjobs.errors import UserError

CHAMPION = "champion"
CHALLENGER = "challenger"

STATUS_TAG = "validation_status"
PENDING, APPROVED, REJECTED = "pending_review", "approved", "rejected"


def is_not_found(exc: Exception) -> bool:
    """Whether an MLflow error says the model, version or alias does not exist."""
    return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"


def is_already_there(exc: Exception) -> bool:
    """Whether an MLflow error says what was to be created exists already."""
    return getattr(exc, "error_code", None) == "RESOURCE_ALREADY_EXISTS"


def set_alias(client: Any, name: str, alias: str, version: str) -> None:
    """Point ``alias`` of ``name`` at ``version``, also while another process sets it.

    MLflow's SQL store sets an alias by reading its row, then inserting or updating it. Two
    registrations of one model that both read "unset" both insert, and the later insert fails
    on the alias table's key (SQLite: "UNIQUE constraint failed"). The row is there by then, so
    setting it again updates it: once, and only when the alias now exists."""
    from mlflow.exceptions import MlflowException

    try:
        client.set_registered_model_alias(name, alias, version)
    except MlflowException:
        if alias not in (client.get_registered_model(name).aliases or {}):
            raise  # not that race: nobody set it meanwhile
        client.set_registered_model_alias(name, alias, version)


def registered_model(client: Any, name: str) -> Any:
    """The registered model ``name``; a UserError naming it (and the known ones) if missing."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_registered_model(name)
    except MlflowException as exc:
        if not is_not_found(exc):
            raise
    known = sorted(m.name for m in client.search_registered_models(max_results=20))
    hint = f"; registered models: {', '.join(known)}" if known else "; none is registered yet"
    raise UserError(f"model {name!r} not found in the registry at {_uri(client)}{hint}")


def model_version(client: Any, name: str, version: str) -> Any:
    """Version ``version`` of ``name``; a UserError naming both if either is missing."""
    from mlflow.exceptions import MlflowException

    if not str(version).isdigit():
        raise UserError(f"version {version!r}: a version is a number, such as 3")
    registered_model(client, name)
    try:
        return client.get_model_version(name, str(version))
    except MlflowException as exc:
        if not is_not_found(exc):
            raise
    versions = sorted(int(v.version) for v in client.search_model_versions(f"name='{name}'"))
    known = f"versions {versions[0]}..{versions[-1]}" if versions else "no versions"
    raise UserError(f"model {name!r} has no version {version} (it has {known})")


def version_by_alias(client: Any, name: str, alias: str) -> Any | None:
    """The version ``alias`` points to, or None when the alias is not set."""
    # read from the model's alias table: a missing alias is RESOURCE_DOES_NOT_EXIST in the
    # sqlite store but INVALID_PARAMETER_VALUE from a server, so its error cannot be trusted
    version = (client.get_registered_model(name).aliases or {}).get(alias)
    return None if version is None else client.get_model_version(name, str(version))


@contextlib.contextmanager
def fluent_tracking(tracking_uri: str, experiment_id: str | None = None) -> Iterator[None]:
    """MLflow's process-global tracking URI (and experiment) set for one call, then restored:
    ``log_model`` and ``load_model`` read them, and nothing else here should."""
    import mlflow

    saved = {key: os.environ.get(key) for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID")}
    mlflow.set_tracking_uri(tracking_uri)
    if experiment_id is not None:
        # without it a logged model lands in the Default experiment, not its run's
        os.environ["MLFLOW_EXPERIMENT_ID"] = experiment_id
    try:
        yield
    finally:
        mlflow.set_tracking_uri(saved["MLFLOW_TRACKING_URI"])
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def tracking_from_args(args: argparse.Namespace) -> TrackingConfig:
    """The tracking store of a review command: the config's when ``--config`` or ``--set
    tracking.*`` says so, else ``MLFLOW_TRACKING_URI``, else the embedded default's."""
    from ffjobs.cli import config_from_args

    tracking = config_from_args(args).tracking
    chosen = args.config is not None or any(o.startswith("tracking.") for o in args.overrides)
    if not chosen and os.environ.get("MLFLOW_TRACKING_URI"):
        tracking.tracking_uri = os.environ["MLFLOW_TRACKING_URI"]
    return tracking


def _uri(client: Any) -> str:
    return getattr(client, "tracking_uri", None) or "the tracking store"
