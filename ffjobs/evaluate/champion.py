"""Registered models to evaluate: the current champion of ``registry.model_name``, or any
``models:/`` URI, loaded as the ``FaceSwap`` module the registry logged.

The registry is asked through a client with explicit URIs, like
:mod:`ffjobs.tracking.mlflow_logger`; only loading a model sets MLflow's process-global
tracking URI, for the call, since ``models:/`` resolution reads nothing else.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from torch import nn

from ffjobs.config import Config
from ffjobs.errors import ExitCode, UserError

CHAMPION_ALIAS = "champion"


class RegistryUnavailable(UserError):
    """The registry could not be asked; the gate cannot compare, so it must not decide."""

    exit_code = ExitCode.RETRYABLE


@dataclass
class RegisteredModel:
    version: str
    model_uri: str
    model: nn.Module


def find_champion(config: Config) -> tuple[str, str] | None:
    """``(version, model_uri)`` of ``models:/<registry.model_name>@champion``; ``None`` when
    there is no such registered model or alias (tracking off: no registry at all)."""
    if not config.tracking.enabled:
        return None
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode
    from mlflow.tracking import MlflowClient

    name, uri = config.registry.model_name, config.tracking.tracking_uri
    try:
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        version = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    except MlflowException as exc:
        if exc.error_code == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            return None
        raise RegistryUnavailable(_registry_problem(uri, exc)) from None
    except Exception as exc:  # connection refused, timeouts: the registry is not there now
        raise RegistryUnavailable(_registry_problem(uri, exc)) from None
    return str(version.version), f"models:/{name}/{version.version}"


def load_registered_model(config: Config, model_uri: str) -> nn.Module:
    """The module logged with ``mlflow.pytorch.log_model`` at ``model_uri`` (``models:/...``,
    ``runs:/...`` or a local model directory)."""
    import mlflow.pytorch
    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException

    uri = config.tracking.tracking_uri
    try:
        with tempfile.TemporaryDirectory(prefix="ffjobs-model-") as tmp, _mlflow_uris(uri):
            local = download_artifacts(artifact_uri=model_uri, dst_path=tmp)
            model = mlflow.pytorch.load_model(local, weights_only=False)
    except MlflowException as exc:
        raise UserError(
            f"--model {model_uri}: cannot load it from {uri}: {_first_line(exc)}"
        ) from None
    if not isinstance(model, nn.Module):
        raise UserError(
            f"--model {model_uri}: is a {type(model).__name__}, not a FaceSwap torch module"
        )
    return model.eval()


def load_champion(config: Config) -> RegisteredModel | None:
    """The current champion, loaded; ``None`` when there is none."""
    found = find_champion(config)
    if found is None:
        return None
    version, model_uri = found
    return RegisteredModel(version, model_uri, load_registered_model(config, model_uri))


@contextlib.contextmanager
def _mlflow_uris(uri: str) -> Iterator[None]:
    """MLflow's process-global tracking URI set to ``uri`` for the block (the registry follows
    it): a ``models:/`` URI is resolved through it, whatever the call's own arguments say."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)


def _registry_problem(uri: str, exc: Exception) -> str:
    return (
        f"registry at {uri}: cannot look up the champion to compare with ({_first_line(exc)}); "
        "the gate does not decide without it: retry when the tracking server is back"
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
