"""Registered models to evaluate: the current champion of ``registry.model_name``, or any
``models:/`` URI, loaded as the ``FaceSwap`` module the registry logged.

The registry is asked through a client with explicit URIs, like
:mod:`ffjobs.tracking.mlflow_logger`; models load through the registry's one loader
(:func:`ffjobs.registry.swap.load_face_swap`), as ``ffjobs swap`` loads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ffjobs.config import Config
from ffjobs.errors import ExitCode, UserError


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
    from mlflow.tracking import MlflowClient

    from ffjobs.registry.client import CHAMPION, is_not_found, version_by_alias

    name, uri = config.registry.model_name, config.tracking.tracking_uri
    try:
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        version = version_by_alias(client, name, CHAMPION)
    except MlflowException as exc:
        if is_not_found(exc):  # no such registered model yet
            return None
        raise RegistryUnavailable(_registry_problem(uri, exc)) from None
    except Exception as exc:  # connection refused, timeouts: the registry is not there now
        raise RegistryUnavailable(_registry_problem(uri, exc)) from None
    if version is None:
        return None
    return str(version.version), f"models:/{name}/{version.version}"


def load_champion(config: Config) -> RegisteredModel | None:
    """The current champion, loaded; ``None`` when there is none."""
    found = find_champion(config)
    if found is None:
        return None
    from ffjobs.registry.swap import load_face_swap

    version, model_uri = found
    return RegisteredModel(version, model_uri, load_face_swap(config.tracking, model_uri))


def _registry_problem(uri: str, exc: Exception) -> str:
    return (
        f"registry at {uri}: cannot look up the champion to compare with ({_first_line(exc)}); "
        "the gate does not decide without it: retry when the tracking server is back"
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
