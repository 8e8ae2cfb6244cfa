"""The stage contract: ``stage(config, run) -> StageOutcome``, and the one way to run a stage.

Each stage function lives with its component (``ffjobs/<component>/stage.py``) and is called
the same way by its CLI command, ``ffjobs run``, the Airflow task and a SLURM job: through
:func:`run_stage`, which times it, prints its line, records it in ``run.json`` and in the MLflow
run. :func:`check_plan` rejects options that cannot work together before any stage runs.
"""

from __future__ import annotations

import importlib
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

from ffjobs.config import Config
from ffjobs.errors import UserError
from ffjobs.runs.run import Run, StageOutcome

STAGES: dict[str, str] = {
    "validate": "ffjobs.data.stage:validate_stage",
    "preflight": "ffjobs.preflight.stage:preflight_stage",
    "train": "ffjobs.train.stage:train_stage",
    "evaluate": "ffjobs.evaluate.stage:evaluate_stage",
    "register": "ffjobs.registry.stage:register_stage",
}
"""Stage name -> ``module:function``, in pipeline order (imported when the stage runs)."""

StageFunction = Callable[[Config, Run], StageOutcome]


def stage_function(name: str) -> StageFunction:
    module, _, function = STAGES[name].partition(":")
    return getattr(importlib.import_module(module), function)


def parse_stages(text: str) -> tuple[str, ...]:
    """``"validate,train"`` -> the stages in pipeline order; unknown names are an error."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in STAGES]
    if unknown or not names:
        raise UserError(
            f"--stages: unknown stage {unknown[0] if unknown else '(none)'}; "
            f"choose from {', '.join(STAGES)}"
        )
    return tuple(s for s in STAGES if s in names)


def check_plan(config: Config, stages: Sequence[str]) -> None:
    """Reject what cannot work before anything starts (nothing is created or run)."""
    if config.slurm.executor == "slurm" and shutil.which("sbatch") is None:
        raise UserError(
            "slurm.executor=slurm but 'sbatch' is not on PATH; run from a cluster login node, "
            "start the local cluster (infra/local/up.sh, then source its env.sh) or set "
            "slurm.executor=local"
        )
    if config.slurm.executor == "local" and config.slurm.nodes > 1:
        raise UserError(
            f"slurm.nodes: the local executor runs on this machine only (got "
            f"{config.slurm.nodes}); set slurm.nodes=1 or slurm.executor=slurm"
        )
    if "train" in stages and config.train.backend == "nccl" and config.slurm.executor == "local":
        from ffjobs.local_ranks import local_gpu_count

        gpus = local_gpu_count()
        ranks = config.slurm.tasks_per_node
        if gpus < ranks:
            raise UserError(
                f"train.backend: nccl needs one GPU per rank; {ranks} rank(s) "
                f"(slurm.tasks_per_node) but {gpus} GPU(s) visible here; use "
                "--set train.backend=auto (gloo on CPU) or fewer ranks"
            )


def run_stage(config: Config, run: Run, name: str, **options: Any) -> StageOutcome:
    """Run one stage, time it, print its line, and record it in the run and its MLflow run.

    ``options`` are the stage function's own keyword arguments (``data=`` for training, ...).
    """
    started = time.perf_counter()
    outcome = stage_function(name)(config, run, **options)
    return record_stage(run, outcome, time.perf_counter() - started)


def record_stage(run: Run, outcome: StageOutcome, seconds: float) -> StageOutcome:
    """Record a stage's ``outcome`` that took ``seconds``: in the run, its line, its MLflow
    metrics, tags and artifacts (also for a stage an Airflow operator drove across deferrals)."""
    name = outcome.name
    outcome.seconds = round(seconds, 1)
    run.record_outcome(outcome)
    run.echo(f"[{outcome.status:>7}] {name:<9} {outcome.seconds:6.1f}s  {outcome.summary}")
    logger = run.logger
    # one step per time the stage ran in this run (a resumed pass, an Airflow retry): each one
    # adds a point, none overwrites or repeats another
    runs_of_stage = run.record.setdefault("stage_runs", {})
    runs_of_stage[name] = step = int(runs_of_stage.get(name, 0)) + 1
    run.save()
    logger.log_metrics({f"{name}_seconds": outcome.seconds, **outcome.metrics}, step=step - 1)
    logger.set_tags({f"ffjobs.{name}": outcome.status})
    logger.log_artifacts(outcome.artifacts, name)
    logger.flush()  # bounded: in an outage the records wait in the run's spool
    return outcome
