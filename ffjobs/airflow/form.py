"""The trigger form of ``ffjobs_pipeline``: its Params, grouped in the form's sections.

Every typed field takes its JSON type and bounds from the config field it sets
(:func:`ffjobs.config.param_schema`), so the form, the REST check and ``--set`` refuse the same
values; its description says the bounds in words with their unit and each preset's value, read
from the presets themselves. ``config`` is a choice of the shipped presets and the deployment's
own ``configs/`` files (listed when the DAG is parsed), each labelled with what it trains and
where. The conf fields are :data:`ffjobs.airflow.trigger_conf.CONF_FIELDS`; a field left empty
keeps the chosen preset's value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import Param

from ffjobs.airflow.schedule import ScheduleConfig
from ffjobs.airflow.trigger_conf import (
    MAX_OVERRIDE_CHARS,
    MAX_OVERRIDES,
    PARAM_OVERRIDES,
    RUN_KEY_PATTERN,
    config_choices,
)
from ffjobs.config import DEFAULT_PRESET, Config, ConfigError, load_config
from ffjobs.config.schema import param_schema
from ffjobs.tracking.redact import redact_text, redact_value

WHAT = "What to train"
WHERE = "Where: cluster and resources"
HOW_LONG = "How long"
RESUME = "Resume"
ADVANCED = "Advanced overrides"
SECTIONS = (WHAT, WHERE, HOW_LONG, RESUME, ADVANCED)
"""The form's sections, in the order it shows them."""

_BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")


@dataclass(frozen=True)
class TypedField:
    """How the form shows a Param that sets one config key."""

    section: str
    title: str
    what: str
    unit: str = ""


TYPED_FIELDS: dict[str, TypedField] = {
    "data_source": TypedField(
        WHAT, "Dataset", "A dataset folder inside the working folder, or an s3:// prefix"
    ),
    "slurm_nodes": TypedField(WHERE, "Nodes", "Nodes of the training job", "nodes"),
    "nproc": TypedField(
        WHERE,
        "GPUs per node",
        "Ranks per node: one per GPU on a cluster, CPU processes with the local executor",
        "GPUs per node",
    ),
    "train_steps": TypedField(HOW_LONG, "Training steps", "Optimizer steps", "steps"),
    "train_lr": TypedField(HOW_LONG, "Learning rate", "The generator's learning rate"),
}
"""The typed Params (:data:`~ffjobs.airflow.trigger_conf.PARAM_OVERRIDES`): section, title,
what the value is and its unit."""


def pipeline_params(
    workdir: Path | None = None, schedule: ScheduleConfig | None = None
) -> dict[str, Param]:
    """The DAG's Params, in the form's order: the presets and the deployment's configs under
    ``workdir`` (default: the current folder, where the Airflow components start) as choices.
    A scheduled run takes every Param's default: the ``schedule``'s preset and ``force``."""
    schedule = schedule or ScheduleConfig()
    presets = _load_presets(config_choices(workdir))
    loaded = {name: config for name, config in presets.items() if isinstance(config, Config)}
    params: dict[str, Param] = {
        "config": Param(
            schedule.config,
            type="string",
            enum=list(presets),
            values_display={name: _preset_label(name, c) for name, c in presets.items()},
            section=WHAT,
            title="Preset",
            description="The config to train with: a shipped preset or one of the deployment's "
            "configs/ files. The fields below change it for this run only; left empty, they "
            "keep its values.",
        ),
    }
    params["data_source"] = _typed_param("data_source", loaded)
    params["force"] = Param(
        schedule.force,
        type=["null", "boolean"],  # a switch always has a value: not marked required
        section=WHAT,
        title="Train even if unchanged",
        description="For a scheduled run (configs/schedule.yaml, which sets this default): "
        "train even when the dataset, config and code equal those of the champion or the "
        "challenger; off, such a run stops after validation and says so. A run triggered by "
        "hand always trains.",
    )
    for name in ("slurm_nodes", "nproc", "train_steps", "train_lr"):
        params[name] = _typed_param(name, loaded)
    params["resume"] = Param(
        None,
        type=["null", "string"],
        pattern=RUN_KEY_PATTERN,
        section=RESUME,
        title="Run to resume",
        description="A run key (shown by ffjobs runs list and in each task's XCom) to continue "
        "from its newest checkpoint, with its config, checkpoints and MLflow run; the fields "
        "above then change that run's config. Empty starts a new run.",
    )
    params["overrides"] = Param(
        [],
        type=["null", "array"],
        items={
            "type": "string",
            "pattern": r"^[A-Za-z_][A-Za-z0-9_.]*=.*$",
            "maxLength": MAX_OVERRIDE_CHARS,
        },
        maxItems=MAX_OVERRIDES,
        section=ADVANCED,
        title="Other settings",
        description="Any other config key, one key=value per line, as ffjobs --set takes them "
        "(e.g. train.batch_size=16); each value is checked by the config's own types and "
        "ranges, and paths stay inside the working folder. Empty: none.",
    )
    return params


def _typed_param(name: str, presets: dict[str, Config]) -> Param:
    field, key = TYPED_FIELDS[name], PARAM_OVERRIDES[name]
    schema = param_schema(key, nullable=True)
    bounds = _bounds_text(schema, field.unit)
    values = _preset_values(presets, key)
    return Param(
        None,
        **_unclamped(schema),
        section=field.section,
        title=field.title,
        description=f"{field.what} ({key}){': ' + bounds if bounds else ''}. "
        f"Empty keeps the preset's value: {values}.",
    )


def _unclamped(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its bounds under ``allOf``: Airflow 3.3's number box clamps a typed
    value to a top-level ``minimum``/``maximum`` when it loses focus, without a word (5 became
    a learning rate of 1). Under ``allOf`` JSON schema still refuses it, and so does the REST
    check, whose answer the form shows on Trigger, naming the field."""
    bounds = {k: schema[k] for k in _BOUNDS if k in schema}
    rest = {k: v for k, v in schema.items() if k not in bounds}
    return {**rest, "allOf": [bounds]} if bounds else rest


def _bounds_text(schema: dict[str, Any], unit: str) -> str:
    """The schema's bounds in words: ``1 to 1024 nodes``, ``1 or more steps``, ``more than 0
    and at most 1``."""
    low, high = schema.get("minimum"), schema.get("maximum")
    unit = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{_number(low)} to {_number(high)}{unit}"
    if low is not None and set(schema) & set(_BOUNDS) == {"minimum"}:
        return f"{_number(low)} or more{unit}"
    words = {
        "minimum": "at least",
        "exclusiveMinimum": "more than",
        "maximum": "at most",
        "exclusiveMaximum": "less than",
    }
    parts = [f"{words[k]} {_number(schema[k])}" for k in _BOUNDS if k in schema]
    return " and ".join(parts) + (unit if parts else "")


def _load_presets(choices: dict[str, Path]) -> dict[str, Config | ConfigError]:
    """Each choice's config, or the error that keeps it from loading (the form still lists it,
    and a trigger naming it is refused with that error)."""
    presets: dict[str, Config | ConfigError] = {}
    for name, path in choices.items():
        try:
            presets[name] = load_config(path)
        except ConfigError as exc:
            presets[name] = exc
    return presets


def _preset_label(name: str, config: Config | ConfigError) -> str:
    """``clusters/h200-ib: 256 px, 100000 steps, SLURM gpu-h200, 2 nodes x 8 GPUs``."""
    if isinstance(config, ConfigError):
        # the key only: the whole message may quote a value, and every viewer sees the form
        return f"{name}: does not load" + (f" (check {config.key})" if config.key else "")
    slurm = config.slurm
    if slurm.gpus_per_node:
        per_node = f"{slurm.gpus_per_node} GPUs"
    else:
        per_node = f"{slurm.tasks_per_node} rank{'s' if slurm.tasks_per_node != 1 else ''}"
    if slurm.executor == "slurm":
        where = f"SLURM {slurm.partition or 'default partition'}, {slurm.nodes} nodes x {per_node}"
    else:
        where = f"this machine, {per_node}"
    return redact_text(f"{name}: {config.model.resolution} px, {config.train.steps} steps, {where}")


def _number(value: float) -> str:
    """``1`` for 1.0, ``0.0002`` for 2e-4: a bound as a person writes it."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _preset_values(presets: dict[str, Config], key: str) -> str:
    """Each preset's value of ``key`` (redacted: every viewer sees the form), presets of one
    value together, the default's first: ``200 in local, clusters/minicluster; 100000 in
    train-256, ...``."""
    groups: dict[str, list[str]] = {}
    ordered = sorted(presets, key=lambda name: name != DEFAULT_PRESET)
    for name in ordered:
        value: Any = presets[name]
        for part in key.split("."):
            value = getattr(value, part)
        text = redact_value(key, value if isinstance(value, str) else json.dumps(value))
        groups.setdefault(text, []).append(name)
    if len(groups) == 1:
        return f"{next(iter(groups))} in every preset"
    return "; ".join(f"{value} in {', '.join(names)}" for value, names in groups.items())
