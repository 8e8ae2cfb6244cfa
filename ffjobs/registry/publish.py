"""Log a :class:`~ffjobs.models.swap.FaceSwap` into an existing MLflow run and register it.

The pipeline owns the run; this module attaches by id and never starts or ends it. The model
is logged as weights and its recorded config (:mod:`ffjobs.registry.weights`), never as a
pickled module. A registration is three requests (the version with its card and tags, the
alias, the tag saying both are done); a retry finishes what a lost connection left undone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffjobs.config.model import ModelConfig
from ffjobs.config.tracking import TrackingConfig
from ffjobs.registry.client import CHALLENGER, fluent_tracking

ARTIFACT_NAME = "face_swap"

REGISTRATION_TAG = "registration"
COMPLETE = "complete"
"""The value of :data:`REGISTRATION_TAG` once a version has its alias: set last."""


def face_swap_signature(resolution: int) -> Any:
    """``(source, target) -> fused``: float32 ``(N, 3, R, R)`` images in [-1, 1]."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    def image(name: str) -> TensorSpec:
        return TensorSpec(np.dtype(np.float32), (-1, 3, resolution, resolution), name)

    return ModelSignature(
        inputs=Schema([image("source"), image("target")]), outputs=Schema([image("fused")])
    )


@contextlib.contextmanager
def _quiet(*logger_names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in logger_names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@dataclass(frozen=True)
class LoggedFaceSwap:
    """A face-swap model logged into a run: MLflow's logged model and its ``models:/`` URI."""

    model_id: str
    model_uri: str


def log_face_swap(
    client: Any, tracking: TrackingConfig, run_id: str, model: Any, model_config: ModelConfig
) -> LoggedFaceSwap:
    """Log ``model`` (built from ``model_config``) into run ``run_id`` as an MLflow logged
    model holding its weights and recorded config (:mod:`ffjobs.registry.weights`), an
    ``MLmodel`` with its signature and requirements, and nothing that runs when loaded. The
    run stays as it is (RUNNING stays RUNNING)."""
    import tempfile

    import torch
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    from ffjobs import __version__
    from ffjobs.registry.weights import CONFIG_FILE, FLAVOR, WEIGHTS_FILE, save_face_swap

    experiment_id = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(
        experiment_id, name=ARTIFACT_NAME, source_run_id=run_id, model_type="ffjobs-face-swap"
    )
    with tempfile.TemporaryDirectory(prefix="ffjobs-model-") as tmp:
        folder = Path(tmp)
        save_face_swap(model, model_config, folder)
        requirements = [f"torch=={torch.__version__.split('+')[0]}", f"ffjobs=={__version__}"]
        (folder / "requirements.txt").write_text("\n".join(requirements) + "\n")
        # metadata for the UI and for readers: no python_function flavor, so no MLflow loader
        # takes it; ffjobs' own loader reads the two files the flavor names
        card = Model(run_id=run_id, model_id=logged.model_id, model_uuid=logged.model_id)
        card.signature = face_swap_signature(model_config.resolution)
        card.add_flavor(
            FLAVOR, weights=WEIGHTS_FILE, config=CONFIG_FILE, ffjobs_version=__version__
        )
        card.save(str(folder / "MLmodel"))
        client.log_model_artifacts(logged.model_id, str(folder))
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    return LoggedFaceSwap(logged.model_id, f"models:/{logged.model_id}")


def register_version(
    client: Any,
    tracking: TrackingConfig,
    name: str,
    model_info: LoggedFaceSwap,
    run_id: str,
    *,
    description: str,
    tags: Mapping[str, str],
    run_link: str | None = None,
) -> Any:
    """A new version of ``name`` (created if missing) from a logged model, with its model
    card as description and its tags in the one request that creates it, then made the
    ``challenger`` by :func:`complete_registration`. Every text goes through
    :func:`~ffjobs.tracking.redact.redact_text` on its way to the registry."""
    from ffjobs.tracking.redact import redact_text

    ensure_registered_model(client, name)
    # the SQL registry store looks the logged model up through MLflow's global tracking URI
    with (
        fluent_tracking(tracking.tracking_uri),
        _quiet(
            "mlflow.store.model_registry.abstract_store"  # "Waiting up to 300 seconds ..."
        ),
    ):
        version = client.create_model_version(
            name,
            source=model_info.model_uri,
            run_id=run_id,
            tags={key: redact_text(str(value)) for key, value in tags.items()},
            run_link=redact_text(run_link) if run_link else None,
            description=redact_text(description),
            model_id=model_info.model_id,
        )
    mark_registered(client, model_info.model_id, name, str(version.version))
    complete_registration(client, name, str(version.version))
    return version


def ensure_registered_model(client: Any, name: str) -> None:
    """The registered model ``name``, created if missing, also when another run's registration
    creates it at the same moment."""
    from mlflow.exceptions import MlflowException

    from ffjobs.registry.client import is_already_there, is_not_found

    try:
        client.get_registered_model(name)
        return
    except MlflowException as exc:
        if not is_not_found(exc):
            raise
    try:
        client.create_registered_model(
            name, description="Face-swap models of ffjobs runs: (source, target) -> fused face."
        )
    except MlflowException as exc:
        if not is_already_there(exc):
            raise


MODEL_VERSIONS_TAG = "mlflow.modelVersions"
"""The logged model's tag listing its registered versions (``[{"name", "version"}]``, JSON), as
``mlflow.register_model`` sets it; the UI reads it (without it: "Not registered")."""


def mark_registered(client: Any, model_id: str, name: str, version: str) -> None:
    """Add ``name`` version ``version`` to the logged model's :data:`MODEL_VERSIONS_TAG` (once,
    also when a retry comes back to it)."""
    import json

    tags = client.get_logged_model(model_id).tags or {}
    try:
        listed = json.loads(tags.get(MODEL_VERSIONS_TAG) or "[]")
    except ValueError:  # not ours to repair: a fresh list
        listed = []
    # MLflow 3 adds the entry itself when a version is created from a logged model, with the
    # version as a number: the same version is never listed twice, whichever wrote it
    if not any(
        isinstance(e, dict) and e.get("name") == name and str(e.get("version")) == str(version)
        for e in listed
    ):
        entry = {"name": name, "version": int(version) if str(version).isdigit() else version}
        client.set_logged_model_tags(model_id, {MODEL_VERSIONS_TAG: json.dumps([*listed, entry])})


def complete_registration(client: Any, name: str, version: str) -> None:
    """The steps after a version exists: the alias ``challenger`` moved to it, then the tag
    :data:`REGISTRATION_TAG` saying both are done. A version without that tag was left
    half-made (the connection was lost between the requests); a retry calls this again. The
    card of the version that was the challenger says it no longer is."""
    from ffjobs.registry.client import set_alias, version_by_alias
    from ffjobs.registry.model_card import refresh_model_card

    before = version_by_alias(client, name, CHALLENGER)
    set_alias(client, name, CHALLENGER, version)
    client.set_model_version_tag(name, version, REGISTRATION_TAG, COMPLETE)
    if before is not None and str(before.version) != str(version):
        refresh_model_card(client, name, [before.version])  # it lost the alias
