"""Typed configuration: dataclasses loaded from YAML, with presets, dotted overrides and clear errors.

One resolved :class:`Config` flows from YAML, the CLI (``--set key=value``) and Airflow Params
into every stage. Each section is a dataclass of its own (``ffjobs/config/<section>.py``); this
package composes them (:class:`Config`), loads them (:mod:`~ffjobs.config.loader`, the generic
rules and their file:line errors), finds presets and their ``extends:`` chains
(:mod:`~ffjobs.config.presets`) and describes fields as JSON schema for Airflow Params
(:mod:`~ffjobs.config.schema`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ffjobs.config.data import DataConfig
from ffjobs.config.evaluate import EvaluateConfig
from ffjobs.config.loader import (
    ConfigError,
    Origin,
    apply_override,
    build_dataclass,
    deep_merge,
    load_dataclass,
    parse_override,
    short,
)
from ffjobs.config.model import ModelConfig
from ffjobs.config.preflight import PreflightConfig
from ffjobs.config.presets import (
    DEFAULT_PRESET,
    embedded_default,
    embedded_preset_dirs,
    load_layers,
    resolve_preset,
)
from ffjobs.config.s3 import S3Config
from ffjobs.config.slurm import SlurmConfig
from ffjobs.config.tracking import RegistryConfig, TrackingConfig
from ffjobs.config.train import TrainConfig

__all__ = [
    "DEFAULT_PRESET",
    "Config",
    "ConfigError",
    "config_from_dict",
    "embedded_preset_dirs",
    "load_config",
    "load_dataclass",
    "parse_override",
    "resolve_preset",
    "short",
]


@dataclass
class Config:
    """The whole resolved configuration of one pipeline run."""

    name: str = "local"
    """Name of the run family: the first part of every run key (``<name>-<stamp>-<random>``)."""
    runs_dir: str = "runs"
    """Where run directories go: ``<runs_dir>/<run key>/`` (config, record, reports, logs)."""
    data: DataConfig = field(default_factory=DataConfig)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    s3: S3Config = field(default_factory=S3Config)
    """The S3-compatible store behind ``s3://`` datasets and checkpoints."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def dump(self, fmt: Literal["yaml", "json"] = "yaml") -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, sort_keys=False)
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> Config:
    """Load a preset name or YAML path, then apply ``--set`` overrides.

    ``None`` means the embedded default, ``configs/local.yaml`` as shipped with ffjobs (never a
    ``local.yaml`` of the working directory).
    """
    origin = Origin()
    data: dict[str, Any] = {}
    if path is None:
        path = embedded_default()
    for source, layer, lines in load_layers(resolve_preset(path)):
        origin.record("", layer, source, lines)
        data = deep_merge(data, layer)
    for text in overrides:
        key, value = parse_override(text)
        data = apply_override(Config, data, key, value, origin)
    return build_dataclass(Config, data, "", origin)


def config_from_dict(
    data: Mapping[str, Any], source: str = "<dict>", overrides: Iterable[str] = ()
) -> Config:
    """Build a config from a plain mapping (a dumped config, Airflow Params, a run's params),
    then apply ``--set`` overrides as :func:`load_config` does."""
    origin = Origin()
    origin.record("", data, source, {})
    merged = dict(data)
    for text in overrides:
        key, value = parse_override(text)
        merged = apply_override(Config, merged, key, value, origin)
    return build_dataclass(Config, merged, "", origin)
