"""Log a :class:`~ffjobs.models.swap.FaceSwap` into an existing MLflow run and register it.

The pipeline owns the run; this module attaches by id and never starts or ends it. MLflow's
``log_model`` works through its process-global settings (tracking URI, experiment), so those
are set only for the duration of the call and restored afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from ffjobs.registry.client import CHALLENGER, fluent_tracking
from ffjobs.tracking.config import TrackingConfig

ARTIFACT_NAME = "face_swap"


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


def face_swap_input_example(resolution: int) -> dict[str, Any]:
    """One mid-grey pair: it documents shapes and dtype, not what a face looks like."""
    import numpy as np

    grey = np.zeros((1, 3, resolution, resolution), dtype=np.float32)
    return {"source": grey, "target": grey.copy()}


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


def log_face_swap(client: Any, tracking: TrackingConfig, run_id: str, model: Any) -> Any:
    """Log ``model`` into run ``run_id`` (which stays as it is: RUNNING stays RUNNING);
    return MLflow's ``ModelInfo`` (``model_id``, ``model_uri``)."""
    import mlflow.pytorch
    import torch

    from ffjobs import __version__

    experiment_id = client.get_run(run_id).info.experiment_id
    # pickle, not pt2: loading must give back the FaceSwap module itself (its identity encoder
    # and resolution), which evaluation and ffjobs swap use; pt2 would give a bare graph
    requirements = [f"torch=={torch.__version__.split('+')[0]}", f"ffjobs=={__version__}"]
    # MLflow warns that pickled models run code when loaded (a registry's models are the
    # project's own) and that its pandas/numpy serving cannot feed a two-input model (it is
    # loaded with mlflow.pytorch.load_model): both are known, neither is news to a user
    with (
        fluent_tracking(tracking.tracking_uri, experiment_id),
        _quiet("mlflow.pytorch", "mlflow.models.model"),
    ):
        return mlflow.pytorch.log_model(
            model,
            name=ARTIFACT_NAME,
            signature=face_swap_signature(model.resolution),
            input_example=face_swap_input_example(model.resolution),
            pip_requirements=requirements,
            serialization_format="pickle",
            run_id=run_id,
        )


def register_version(
    client: Any,
    tracking: TrackingConfig,
    name: str,
    model_info: Any,
    run_id: str,
    *,
    description: str,
    tags: Mapping[str, str],
    run_link: str | None = None,
) -> Any:
    """A new version of ``name`` (created if missing) from a logged model, with its model
    card as description, its tags, and the alias ``challenger`` moved to it."""
    from mlflow.exceptions import MlflowException

    from ffjobs.registry.client import is_not_found

    try:
        client.get_registered_model(name)
    except MlflowException as exc:
        if not is_not_found(exc):
            raise
        client.create_registered_model(
            name, description="Face-swap models of ffjobs runs: (source, target) -> fused face."
        )
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
            tags={key: str(value) for key, value in tags.items()},
            run_link=run_link,
            description=description,
            model_id=model_info.model_id,
        )
    client.set_registered_model_alias(name, CHALLENGER, version.version)
    return version
