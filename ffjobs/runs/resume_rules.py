"""Which config fields a resumed run may change, and why: the one list ``--resume`` consults.

``ffjobs run --resume KEY --set key=value`` (and ``ffjobs evaluate --run-key``, the Airflow
``resume`` Param, a restarted torchrun group) continues a run with its own config plus the
changes. A change either takes effect for the rest of the run, or is refused before anything
is touched (exit 2): a resume never says yes to a change it then ignores.

:data:`ON_RESUME` maps a dotted config path (a field or a whole section) to its rule; the most
specific path wins, so a section's rule covers its fields unless a field has its own. Every
field of :class:`~ffjobs.config.Config` is covered (a test walks them all); a field that is
not would be refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ffjobs.config import Config, short


@dataclass(frozen=True)
class OnResume:
    """What changing one field does when a run is resumed."""

    takes_effect: bool
    why: str
    """How it takes effect; for a refused field, a clause that reads before ", so it cannot
    change on resume"."""


def _applies(why: str) -> OnResume:
    return OnResume(True, why)


def _refused(why: str) -> OnResume:
    return OnResume(False, why)


_OPTIMIZER = _applies("set on the optimizer after its checkpointed state is loaded")
_SCHEDULE = _applies("the schedule is rebuilt from the config at every start, at the step resumed")
_EVERY_STEP = _applies("read at every step")
_AT_START = _applies("read when the training starts")
_CHECKPOINTS = _applies("applies to the checkpoints written from then on")
_REPORTING = _applies("applies to the reports from then on")
_GLOBAL_BATCH = _refused(
    "it sizes the global batch the run's steps, learning rate and data epochs were set up "
    "with (and the sampler state of --data memory)"
)
_INDEX = _refused("it maps the dataset's files to identities, the index training samples")

ON_RESUME: dict[str, OnResume] = {
    "name": _refused("it names the run family, and the run keeps the key it was started with"),
    "runs_dir": _applies("where the run's folder is found (a moved runs folder)"),
    # data: what is trained on is fixed; where it is read and how fast may change
    "data": _refused("it decides which images the run's training index holds"),
    "data.source": _applies(
        "where the dataset is read; validate checks a moved copy against the run's fingerprint"
    ),
    "data.layout": _INDEX,
    "data.manifest": _INDEX,
    "data.synth": _refused("it describes the synthetic dataset the run was generated with"),
    "data.validation": _refused(
        "it decides which files validation quarantines, so which images training indexes"
    ),
    "data.validation.workers": _applies("how fast validation runs, not what it decides"),
    "data.validation.cache_dir": _applies("how fast validation runs, not what it decides"),
    "data.val_fraction": _refused("it splits the identities into training and evaluation"),
    "data.same_identity_prob": _refused(
        "it draws the training pairs, part of the data stream the checkpoint continues"
    ),
    "data.num_workers": _applies("loader processes only: the pairs drawn do not depend on it"),
    "data.prefetch_factor": _applies("loader processes only: the pairs drawn do not depend on it"),
    "preflight": _applies("the fabric check runs again with it"),
    "model": _refused("its checkpoints hold tensors of the model's shape and would not load"),
    "model.identity_weights": _refused(
        "it is the frozen identity encoder the generator's identity loss is measured with"
    ),
    "model.losses": _EVERY_STEP,
    "train.steps": _applies("training runs on to the new count (a cosine schedule spans it)"),
    "train.batch_size": _GLOBAL_BATCH,
    "train.grad_accum": _GLOBAL_BATCH,
    "train.lr": _OPTIMIZER,
    "train.lr_discriminator": _OPTIMIZER,
    "train.betas": _OPTIMIZER,
    "train.weight_decay": _OPTIMIZER,
    "train.adam_eps": _OPTIMIZER,
    "train.lr_schedule": _SCHEDULE,
    "train.warmup_steps": _SCHEDULE,
    "train.min_lr_ratio": _SCHEDULE,
    "train.grad_clip": _EVERY_STEP,
    "train.ema_decay": _applies(
        "read at every step (null drops the average; a number starts one from the resumed weights)"
    ),
    "train.precision": _refused(
        "the fp16 loss scaler's state comes from the checkpoint and the run's numerics with it"
    ),
    "train.channels_last": _AT_START,
    "train.compile": _AT_START,
    "train.compile_mode": _AT_START,
    "train.compile_cache": _AT_START,
    "train.fused_adam": _refused(
        "the optimizer's kernel is part of its checkpointed state, which would override it"
    ),
    "train.bucket_cap_mb": _AT_START,
    "train.seed": _refused(
        "the data order, the pair draws and every rank's random streams come from it, and the "
        "checkpoint continues them"
    ),
    "train.deterministic": _AT_START,
    "train.cudnn_benchmark": _AT_START,
    "train.log_every": _REPORTING,
    "train.progress": _REPORTING,
    "train.peak_flops": _REPORTING,
    "train.checkpoint_every": _CHECKPOINTS,
    "train.keep_checkpoints": _CHECKPOINTS,
    "train.async_checkpoint": _CHECKPOINTS,
    "train.checkpoint_dir": _refused(
        "it holds the run's checkpoints, and another folder would train the run again from step 0"
    ),
    "train.resume": _refused(
        "false would train the run again from step 0 over its own checkpoints"
    ),
    "train.backend": _AT_START,
    "train.init_timeout_s": _AT_START,
    "train.collective_timeout_s": _AT_START,
    "train.faults": _AT_START,
    "slurm": _applies(
        "read at every submission (another number of ranks resumes without continuing the data "
        "order and random streams exactly)"
    ),
    "evaluate": _applies("the evaluation runs again with it"),
    "tracking": _applies("read by every process of the run from then on"),
    "tracking.experiment": _refused("the run's MLflow run already belongs to its experiment"),
    "tracking.artifact_location": _refused(
        "MLflow sets it on an experiment when it creates one, and the run's exists"
    ),
    "registry": _applies("the register stage runs with it"),
    "s3": _applies("where the S3 store is reached"),
}
"""Dotted config path -> what changing it on resume does (most specific path wins)."""

UNLISTED = _refused("it is not known to take effect on a resumed run")


def rule_for(key: str) -> OnResume:
    """The rule of the field at dotted ``key``: its own, else its closest section's."""
    path = key
    while path:
        if path in ON_RESUME:
            return ON_RESUME[path]
        path = path.rpartition(".")[0]
    return UNLISTED


def config_fields(config: Any, prefix: str = "") -> dict[str, Any]:
    """Every field of ``config`` that is not a section, by dotted path, with its value as
    ``Config.to_dict()`` has it (a list or mapping field is one value)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        key = f"{prefix}{f.name}"
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            out.update(config_fields(value, f"{key}."))
        else:
            out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def changed_fields(before: Config, after: Config) -> dict[str, tuple[Any, Any]]:
    """``{dotted path: (before, after)}`` of the fields whose values differ."""
    old, new = config_fields(before), config_fields(after)
    return {key: (old[key], new[key]) for key in old if old[key] != new[key]}


def check_changes(key: str, changes: dict[str, tuple[Any, Any]]) -> None:
    """Raise :class:`~ffjobs.errors.UserError` (exit 2) naming the first change that cannot
    take effect on resumed run ``key``, and how many others cannot."""
    from ffjobs.errors import UserError

    refused = sorted(path for path in changes if not rule_for(path).takes_effect)
    if not refused:
        return
    first = refused[0]
    old, new = changes[first]
    more = f" (and {', '.join(refused[1:])})" if len(refused) > 1 else ""
    raise UserError(
        f"--resume {key}: {first} is {short(new)} but the run was started with {short(old)}; "
        f"{rule_for(first).why}, so it cannot change on resume{more} (start a new run instead)"
    )
