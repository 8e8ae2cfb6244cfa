"""One training job as the ranks receive it: what to train, where its checkpoints go, which
MLflow run rank 0 logs into. Plain data, so it travels as JSON to local ranks and pickled to
SLURM tasks alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ffjobs.config import Config, config_from_dict

DATA_KINDS = ("dataset", "memory")
"""``dataset``: the configured image dataset (training identities); ``memory``: random tensors."""


@dataclass
class TrainJob:
    config: dict[str, Any]
    """The resolved config (``Config.to_dict()``)."""
    checkpoint_dir: str
    """This run's checkpoint folder (``<train.checkpoint_dir>/<run key>``), local or s3://."""
    mlflow_run_id: str | None = None
    """The pipeline's MLflow run; rank 0 attaches to it (never starts or ends it)."""
    tracking_dir: str | None = None
    """The run's tracking spool folder (``<run dir>/tracking``): rank 0 of each node spools what
    it logs there first, so an outage or a crash loses nothing (see ``ffjobs.tracking``)."""
    signing_key_file: str | None = None
    """The run's signing key (``<run dir>/signing.key``, :mod:`ffjobs.train.compile.signing`) that the
    compile cache in the checkpoint folder is signed with; the path travels, never the key.
    Without one, a key of the user's own for this checkpoint folder."""
    quarantine: str | None = None
    """File listing the images validation rejected; the training index skips them."""
    validated_files: str | None = None
    """The files validation passed, with their sizes and versions (``<run>/validation/``): each
    rank refuses a dataset that differs, before its first step. None: no check (a run without
    validation, or ``data`` memory)."""
    data: str = "dataset"
    mode: str = "train"
    """``train``, or ``bench`` (``ffjobs bench train``: timed steps, no checkpoints kept)."""
    bench: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``ffjobs.train.measure.bench_rank`` in bench mode."""

    def __post_init__(self) -> None:
        if self.data not in DATA_KINDS:
            raise ValueError(f"data must be one of {DATA_KINDS}, got {self.data!r}")

    @classmethod
    def of(cls, config: Config, **fields: Any) -> TrainJob:
        """A job for ``config``; the checkpoint folder defaults to ``train.checkpoint_dir``."""
        fields.setdefault("checkpoint_dir", config.train.checkpoint_dir)
        return cls(config=config.to_dict(), **fields)

    def resolved_config(self) -> Config:
        return config_from_dict(self.config, source="the training job")
