"""The training stage: DDP on this machine's ranks, into the run's own checkpoint folder."""

from __future__ import annotations

from typing import Any

from ffjobs.config import Config
from ffjobs.errors import ExitCode
from ffjobs.runs.run import Run, StageOutcome
from ffjobs.train.job import TrainJob


def train_job(config: Config, checkpoint_dir: str, **fields: Any) -> TrainJob:
    """The job every rank of this run trains (inputs of the embedded default made first)."""
    from ffjobs.models.prepare import ensure_demo_inputs

    if fields.get("data", "dataset") == "dataset":
        ensure_demo_inputs(config)
    return TrainJob.of(config, checkpoint_dir=checkpoint_dir, **fields)


def train_stage(config: Config, run: Run, *, data: str = "dataset") -> StageOutcome:
    """Train ``slurm.tasks_per_node`` local ranks, resuming from the run's newest verified
    checkpoint; rank 0 logs into the run's MLflow run.

    A run whose checkpoint already reached ``train.steps`` trains nothing and says so
    (``skipped``). Facts: ``checkpoint`` (the last one written), ``start_step``, ``final_step``.
    """
    from ffjobs.local_ranks import LaunchFailed, launched_rank
    from ffjobs.train.launch import launch_job
    from ffjobs.train.worker import run_rank

    job = train_job(
        config,
        run.checkpoint_dir,
        mlflow_run_id=run.mlflow_run_id,
        quarantine=run.facts("validate").get("quarantine"),
        data=data,
    )
    log_dir = run.stage_dir("train") / "logs"
    try:
        if launched_rank():  # torchrun/srun started this process as rank 0 of the job
            result = run_rank(job)
        else:
            result = launch_job(
                job, config.slurm.tasks_per_node, log_dir=log_dir, quiet_stdout=run.quiet_stdout
            )
    except LaunchFailed as exc:
        return StageOutcome(
            "train",
            "failed",
            0.0,
            str(exc).splitlines()[0],
            ExitCode.FAILED,
            facts={"log": str(exc.log), "failed_rank": exc.rank},
        )
    start, final = result.get("start_step"), result.get("final_step")
    facts = {
        "checkpoint": result.get("last_checkpoint"),
        "checkpoint_dir": run.checkpoint_dir,
        "start_step": start,
        "final_step": final,
    }
    if start is not None and start == final:
        return StageOutcome(
            "train",
            "skipped",
            0.0,
            f"nothing to train: the run's checkpoint is at step {final}, which already reaches "
            f"train.steps={config.train.steps} (raise train.steps to train on)",
            facts=facts,
        )
    history = result.get("history") or [{}]
    last = history[-1]
    summary = (
        f"steps {start} -> {final} on {result.get('world_size')} ranks"
        + (f", {last['images_per_s']:.1f} img/s" if "images_per_s" in last else "")
        + f"; checkpoint {result.get('last_checkpoint')}"
    )
    if result.get("stopped_early"):
        return StageOutcome(
            "train",
            "failed",
            0.0,
            f"stopped on a signal after a checkpoint: {summary}",
            ExitCode.RETRYABLE,
            facts=facts,
        )
    return StageOutcome("train", "passed", 0.0, summary, facts=facts)
