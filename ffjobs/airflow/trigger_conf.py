"""The conf of an ``ffjobs_pipeline`` DAG run, checked before the run exists and again in its
first task: which fields it may carry, which config it may name, and what its values may be.

One function, :func:`check_trigger_conf`, serves the REST/trigger-form check (the api-server
plugin, :mod:`ffjobs.airflow.plugin`) and the first task. Values are checked by the typed
config itself (:func:`ffjobs.config.load_config`, exactly as ``ffjobs --set``); this module only
adds what a remote caller must not do that a local user may: name a file outside the
deployment's ``configs/`` folder, or point a path outside the working folder. Standard library
and ffjobs' config only: the api-server imports it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from ffjobs.config import (
    ConfigError,
    embedded_preset_dirs,
    load_config,
    parse_override,
    short,
)

PARAM_OVERRIDES: dict[str, str] = {
    "train_steps": "train.steps",
    "train_lr": "train.lr",
    "data_source": "data.source",
    "slurm_nodes": "slurm.nodes",
    "nproc": "slurm.tasks_per_node",
}
"""Typed DAG Params and the config key each one sets (left empty, the preset's value stays)."""

CONF_FIELDS = ("config", *PARAM_OVERRIDES, "resume", "force", "overrides")
"""Every field a DAG run's conf may carry: the DAG's Params (:mod:`ffjobs.airflow.form`)."""

RUN_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A run key as ``resume`` takes it (the shape :mod:`ffjobs.runs` gives keys)."""

CONFIG_NAME_PATTERN = r"^(?!/)(?!~)(?!.*(^|/)\.\.(/|$))[A-Za-z0-9_.+/-]{1,200}$"
"""A preset name or a relative path: no leading ``/`` or ``~``, no ``..`` segment."""

PATH_KEYS = frozenset(
    {
        "runs_dir",
        "data.source",
        "data.manifest",
        "data.validation.cache_dir",
        "model.identity_weights",
        "train.checkpoint_dir",
        "train.faults.pause_until_file",
        "slurm.folder",
        "evaluate.identity_weights",
        "evaluate.pose_weights",
        "evaluate.fid_weights",
    }
)
"""Config keys holding a file or folder: set from a conf, they stay inside the working folder
(relative, no ``..``) or name an ``s3://`` location."""

DEPLOYMENT_KEYS = frozenset(
    {
        "slurm.setup",
        "slurm.env",
        "slurm.python",
        "slurm.srun_args",
        "slurm.container_image",
        "tracking.tracking_uri",
        "tracking.artifact_location",
        "s3.endpoint_url",
    }
)
"""Config keys (and the keys under them) a conf may not set: they name shell lines, programs or
a container run on the cluster, or where the run's data and credentials are sent. Whoever may
trigger a DAG run may not thereby run commands as the deployment: these belong in the
deployment's own config (``configs/``)."""

MAX_OVERRIDES = 64
MAX_OVERRIDE_CHARS = 2000
"""A form's overrides are a few short lines; the bounds keep a request from costing more."""

CONFIGS_FOLDER = "configs"
"""The deployment's presets, relative to the working folder the Airflow components start in."""

SCHEDULE_FILE = "schedule.yaml"
"""The DAG's schedule (:mod:`ffjobs.airflow.schedule`) in ``configs/``: not a preset."""


def preset_names() -> list[str]:
    """The presets that ship with ffjobs, as ``config`` names them (``local``,
    ``clusters/h200-ib``, ...), sorted."""
    names = {
        path.relative_to(directory).with_suffix("").as_posix()
        for directory in embedded_preset_dirs()
        for path in directory.rglob("*.yaml")
    }
    return sorted(names)


def config_choices(workdir: Path | None = None) -> dict[str, Path]:
    """Every ``config`` a conf may name, sorted, with the file each one loads: the deployment's
    ``configs/**/*.yaml`` under ``workdir`` (default: the current folder) and the shipped presets
    (:func:`preset_names`); a deployment's file of the same name wins, as in
    :func:`check_trigger_conf`."""
    workdir = (workdir or Path.cwd()).resolve()
    folder = workdir / CONFIGS_FOLDER
    own = (
        {
            path.relative_to(folder).with_suffix("").as_posix()
            for path in folder.rglob("*.yaml")
            if path != folder / SCHEDULE_FILE
        }
        if folder.is_dir()
        else set()
    )
    choices = {}
    for name in sorted(own | set(preset_names())):
        try:
            choices[name] = _config_file(name, workdir)
        except ConfigError:
            continue  # a name no conf could use (a symlink out of configs/, odd characters)
    return choices


def check_trigger_conf(conf: Any, workdir: Path | None = None) -> tuple[Path, list[str]]:
    """Check a DAG run's conf; return the config file it names and its ``--set`` strings.

    ``workdir`` is the deployment's working folder (default: the current one), holding
    ``configs/`` and the relative paths. Raises :class:`ConfigError` whose ``key`` is the
    offending conf field (``slurm_nodes``, ``overrides[1]``, ...) and whose message quotes at
    most a short prefix of the value; a file is never read outside ``configs/`` and the shipped
    presets. A ``None`` field counts as absent (a Param left empty).
    """
    workdir = (workdir or Path.cwd()).resolve()
    if not isinstance(conf, Mapping):
        raise _error("conf", f"must be a JSON object, got {type(conf).__name__}")
    unknown = sorted(str(name) for name in conf if name not in CONF_FIELDS)
    if unknown:
        raise _error(unknown[0], f"unknown field; allowed: {', '.join(CONF_FIELDS)}")
    config_path = _config_file(conf.get("config") or "local", workdir)
    resume = conf.get("resume")
    if resume is not None and not (isinstance(resume, str) and re.match(RUN_KEY_PATTERN, resume)):
        raise _error("resume", f"must be a run key, got {short(resume)}")
    force = conf.get("force")
    if force is not None and not isinstance(force, bool):
        raise _error("force", f"must be true or false, got {short(force)}")
    sets = _typed_sets(conf) + _override_sets(conf.get("overrides"))
    for field_name, text in sets:
        _as_field(field_name, _check_set, text)
    texts = [text for _, text in sets]
    try:
        load_config(config_path, texts)  # typed as --set, with the rules that span fields
    except ConfigError as together:
        for field_name, text in sets:  # name the field whose value alone is wrong, if one is
            _as_field(field_name, load_config, config_path, [text])
        raise _error("overrides", str(together)) from None
    return config_path, texts


def _typed_sets(conf: Mapping[str, Any]) -> list[tuple[str, str]]:
    # JSON is a YAML subset: ``--set`` reads the value back with its type (strings quoted)
    return [
        (name, f"{key}={json.dumps(conf[name])}")
        for name, key in PARAM_OVERRIDES.items()
        if conf.get(name) is not None
    ]


def _override_sets(overrides: Any) -> list[tuple[str, str]]:
    if overrides is None:
        return []
    if not isinstance(overrides, list):
        raise _error("overrides", f"must be a list of key=value strings, got {short(overrides)}")
    if len(overrides) > MAX_OVERRIDES:
        raise _error("overrides", f"at most {MAX_OVERRIDES} lines, got {len(overrides)}")
    sets = []
    for index, text in enumerate(overrides):
        field_name = f"overrides[{index}]"
        if not isinstance(text, str):
            raise _error(field_name, f"must be a key=value string, got {short(text)}")
        if len(text) > MAX_OVERRIDE_CHARS:
            raise _error(field_name, f"longer than {MAX_OVERRIDE_CHARS} characters")
        sets.append((field_name, text))
    return sets


def _config_file(name: Any, workdir: Path) -> Path:
    """The file ``config`` names: ``configs/<name>.yaml`` of the deployment, else a shipped
    preset; never a file outside those folders (checked after symlinks are followed)."""
    shipped = ", ".join(preset_names())
    wrong = f"must be a preset ({shipped}) or a relative path inside {CONFIGS_FOLDER}/"
    if not isinstance(name, str) or not re.match(CONFIG_NAME_PATTERN, name):
        raise _error("config", f"{wrong}, got {short(name)}")
    folders = [workdir / CONFIGS_FOLDER, *embedded_preset_dirs()]
    for folder in folders:
        folder = folder.resolve()
        for candidate in (folder / name, folder / f"{name}.yaml"):
            resolved = candidate.resolve()
            if resolved == (workdir / CONFIGS_FOLDER / SCHEDULE_FILE).resolve():
                continue  # the schedule, not a preset
            if resolved.is_relative_to(folder) and resolved.is_file():
                return resolved
    raise _error("config", f"no such preset; {wrong}, got {short(name)}")


def _check_path(value: Any) -> None:
    if not isinstance(value, str) or value.startswith("s3://"):
        return  # a wrong type is the typed config's to name
    path = PurePosixPath(value)
    if path.is_absolute() or value.startswith("~") or ".." in path.parts or "://" in value:
        raise ConfigError(
            "must be a relative path inside the working folder (no '..', not absolute) or an "
            f"s3:// location, got {short(value)}"
        )


def _check_set(text: str) -> None:
    """One ``key=value``: parsed as ``--set`` parses it, not a deployment key, its path kept
    inside the working folder (its type and range are the typed config's to check)."""
    key, value = parse_override(text)
    owner = next((k for k in DEPLOYMENT_KEYS if key == k or key.startswith(k + ".")), None)
    if owner is not None:
        raise ConfigError(
            f"{short(key)}: set in the deployment's config (configs/), not from a DAG run's "
            f"conf ({owner} runs commands on the cluster or decides where the run's data goes)"
        )
    if key in PATH_KEYS:
        _check_path(value)


def _as_field(field_name: str, check: Callable[..., Any], *args: Any) -> None:
    """Run ``check``; a config error it raises is re-raised naming the conf field."""
    try:
        check(*args)
    except ConfigError as exc:
        # the field is the value's source here, not the command line's --set
        message = str(exc).removeprefix("--set: ")
        raise _error(field_name, message) from None


def _error(field_name: str, message: str) -> ConfigError:
    return ConfigError(message, source="conf", key=field_name)
