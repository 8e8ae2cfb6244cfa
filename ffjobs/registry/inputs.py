"""What a model was trained from, and whether a new run's inputs are the same.

A registered version carries three tags: the dataset's fingerprint (from validation), the hash
of the resolved config and the code version (the ffjobs version and its git commit). A
scheduled run compares its own three with those of the versions behind the ``champion`` and
``challenger`` aliases (:func:`unchanged_since`): equal, training again would only make the
same model. Plain functions, nothing Airflow-specific: the CLI can ask the same question.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ffjobs.config import Config
from ffjobs.registry.client import CHALLENGER, CHAMPION
from ffjobs.tracking.provenance import UNKNOWN, code_commit

COMPARED_ALIASES = (CHAMPION, CHALLENGER)
"""The versions a scheduled run compares with, in this order."""


@dataclass(frozen=True)
class ModelInputs:
    """The inputs that decide which model a run trains."""

    dataset_fingerprint: str
    config_hash: str
    code_version: str

    def tags(self) -> dict[str, str]:
        """The registered version's tags (and the run's, prefixed ``ffjobs.``)."""
        return asdict(self)

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> ModelInputs:
        """A version's inputs from its tags; a tag it lacks (an older version) is ``unknown``."""
        return cls(**{f.name: tags.get(f.name) or UNKNOWN for f in fields(cls)})

    def known(self) -> bool:
        """Whether every input is known: an unknown one is never equal to anything."""
        values = asdict(self).values()
        return UNKNOWN not in values and all(values)

    def describe(self) -> str:
        """``dataset fingerprint 3f2a..., config 9c1e..., code 0.1.0@5d7e...``, for messages."""
        return (
            f"dataset fingerprint {self.dataset_fingerprint[:12]}, "
            f"config {self.config_hash[:12]}, code {self.code_version}"
        )


def config_hash(config: Config) -> str:
    """SHA-256 of the resolved config (keys sorted): equal configs, equal hashes."""
    text = json.dumps(config.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def code_version() -> str:
    """``<ffjobs version>@<commit>``: the commit is ``unknown`` for an installed wheel (its
    version is then all there is) and ends ``-dirty`` for uncommitted changes."""
    from ffjobs import __version__

    return f"{__version__}@{code_commit()}"


def run_inputs(config: Config, dataset_fingerprint: str | None) -> ModelInputs:
    """The inputs of a run with ``config`` on the dataset validation fingerprinted."""
    return ModelInputs(dataset_fingerprint or UNKNOWN, config_hash(config), code_version())


def unchanged_since(inputs: ModelInputs, registered: Mapping[str, Any]) -> str | None:
    """Why training again is not needed, or ``None`` when it is.

    ``registered`` maps an alias to its model version (``.version``, ``.tags``), as
    :func:`registered_by_alias` reads them; the first alias of :data:`COMPARED_ALIASES` whose
    version has the same inputs is named in the answer.
    """
    if not inputs.known():
        return None
    for alias in COMPARED_ALIASES:
        version = registered.get(alias)
        if version is not None and ModelInputs.from_tags(version.tags or {}) == inputs:
            return f"inputs unchanged since version {version.version} ({alias}): " + (
                inputs.describe()
            )
    return None


def registered_by_alias(client: Any, name: str) -> dict[str, Any]:
    """The versions of model ``name`` behind :data:`COMPARED_ALIASES` (a model not registered
    yet, or an alias not set, is left out)."""
    from mlflow.exceptions import MlflowException

    from ffjobs.registry.client import is_not_found

    try:
        aliases = client.get_registered_model(name).aliases or {}
    except MlflowException as exc:
        if is_not_found(exc):
            return {}
        raise
    return {
        alias: client.get_model_version(name, str(aliases[alias]))
        for alias in COMPARED_ALIASES
        if alias in aliases
    }
