"""An in-memory MLflow model registry at the client boundary: the calls the review makes
(aliases, version tags, lookups, the card in the version's description), with MLflow's not-found error for a missing model or version.
The real server runs the same paths in tests/registry/test_review.py and
tests/integration/test_airflow_review.py."""

from __future__ import annotations

from types import SimpleNamespace


def _not_found(what: str):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

    return MlflowException(f"{what} not found", error_code=RESOURCE_DOES_NOT_EXIST)


class FakeRegistry:
    tracking_uri = "fake://registry"

    def __init__(self) -> None:
        self.aliases: dict[str, dict[str, str]] = {}
        self.versions: dict[str, dict[str, dict[str, str]]] = {}
        self.descriptions: dict[tuple[str, str], str] = {}

    def register(self, name: str) -> str:
        """A new version of ``name``, pending review, as the challenger (the register stage)."""
        versions = self.versions.setdefault(name, {})
        self.aliases.setdefault(name, {})
        version = str(len(versions) + 1)
        versions[version] = {"validation_status": "pending_review"}
        self.aliases[name]["challenger"] = version
        return version

    def get_registered_model(self, name: str):
        if name not in self.versions:
            raise _not_found(f"model {name}")
        return SimpleNamespace(name=name, aliases=dict(self.aliases[name]))

    def search_registered_models(self, max_results: int = 100):
        return [SimpleNamespace(name=n) for n in sorted(self.versions)][:max_results]

    def get_model_version(self, name: str, version: str):
        if str(version) not in self.versions.get(name, {}):
            raise _not_found(f"model {name} version {version}")
        return SimpleNamespace(
            version=str(version),
            tags=dict(self.versions[name][str(version)]),
            description=self.descriptions.get((name, str(version)), ""),
        )

    def update_model_version(self, name: str, version: str, description: str) -> None:
        self.descriptions[(name, str(version))] = description

    def search_model_versions(self, filter_string: str):
        name = filter_string.split("'")[1]
        return [self.get_model_version(name, v) for v in self.versions.get(name, {})]

    def set_model_version_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.versions[name][str(version)][key] = str(value)

    def set_registered_model_alias(self, name: str, alias: str, version: str) -> None:
        self.aliases[name][alias] = str(version)

    def delete_registered_model_alias(self, name: str, alias: str) -> None:
        del self.aliases[name][alias]
