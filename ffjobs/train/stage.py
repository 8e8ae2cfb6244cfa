"""The training stage: DDP on this machine's ranks, into the run's own checkpoint folder."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffjobs.config import Config
from ffjobs.errors import ExitCode, UserError, failure_exit_code
from ffjobs.runs.run import Run, StageOutcome
from ffjobs.train.attempts import (
    local_attempt,
    read_attempts,
    record_attempt,
    run_goodput,
)
from ffjobs.train.compile.signing import load_or_create_key, run_key_file
from ffjobs.train.job import TrainJob

if TYPE_CHECKING:
    from ffjobs.local_ranks import LaunchFailed
    from ffjobs.slurm.failures import Failure


def train_job(config: Config, checkpoint_dir: str, **fields: Any) -> TrainJob:
    """The job every rank of this run trains (inputs of the embedded default made first, the
    evaluation recogniser too when ``evaluate.every_steps`` measures on the way, and a dataset
    that is not there refused here, before any rank starts)."""
    from ffjobs.data.sources import open_source
    from ffjobs.models.prepare import ensure_demo_inputs
    from ffjobs.quality.encoder import ensure_evaluation_encoder

    if fields.get("data", "dataset") == "dataset":
        ensure_demo_inputs(config)
        every = config.evaluate.every_steps
        if every and config.train.steps >= every:  # measured on the way: made before training
            ensure_evaluation_encoder(config)
        open_source(
            config.data.source, endpoint_url=config.s3.endpoint_url, region=config.s3.region
        )
    return TrainJob.of(config, checkpoint_dir=checkpoint_dir, **fields)


def run_train_job(config: Config, run: Run, *, data: str | None = None) -> TrainJob:
    """The job every rank of ``run`` trains, whoever starts it (the train stage, the Airflow
    operator): its checkpoints, MLflow run, spool, quarantine, the files its validation passed
    and signing key, and the inputs the run started training on (:func:`run_inputs`)."""
    data = run_inputs(run, data)
    key_file = run_key_file(run.dir).resolve()
    load_or_create_key(key_file)  # before any rank starts: every rank reads this one
    validated = run.facts("validate")
    return train_job(
        config,
        run.checkpoint_dir,
        signing_key_file=str(key_file),
        mlflow_run_id=run.mlflow_run_id,
        tracking_dir=str(run.tracking_dir.resolve()),
        quarantine=validated.get("quarantine"),
        validated_files=validated.get("validated_files"),
        data=data,
    )


def run_inputs(run: Run, data: str | None) -> str:
    """What ``run`` trains on (``dataset`` or ``memory``, as ``ffjobs train --data``): the
    inputs its first training started with, kept in its record, so that every later pass (a
    resume, a retry, a re-attach, an Airflow task) continues on exactly those; ``data`` None
    asks for them. A run's first training records ``data`` (default ``dataset``)."""
    started = run.record.get("train_data")
    if started is None:
        run.record["train_data"] = started = data or "dataset"
        run.save()
    elif data is not None and data != started:
        raise UserError(
            f"run {run.key} trains on --data {started} (how its training started); it cannot "
            f"continue on --data {data}: drop --data, or start a new run"
        )
    return started


def train_stage(
    config: Config, run: Run, *, data: str | None = None, wait: bool = True
) -> StageOutcome:
    """Train ``slurm.tasks_per_node`` local ranks, resuming from the run's newest verified
    checkpoint; rank 0 logs into the run's MLflow run.

    A run whose checkpoint already reached ``train.steps`` trains nothing and says so
    (``skipped``). Facts: ``checkpoint`` (the last one written), ``start_step``, ``final_step``.
    """
    from ffjobs.local_ranks import LaunchFailed, launched_rank
    from ffjobs.train.launch import launch_job

    job = run_train_job(config, run, data=data)
    if config.slurm.executor == "slurm":
        from ffjobs.train.on_slurm import train_on_slurm

        return train_on_slurm(config, run, job, wait=wait)
    log_dir = run.stage_dir("train") / "logs"
    started_at, start_step = time.time(), _checkpoint_step(run)
    try:
        if launched_rank():  # torchrun/srun started this process as rank 0 of the job
            from ffjobs.train.worker import run_rank

            result = run_rank(job)
        else:
            result = launch_job(
                job, config.slurm.tasks_per_node, log_dir=log_dir, quiet_stdout=run.quiet_stdout
            )
    except LaunchFailed as exc:
        failure = launch_failure(exc, log_dir, config.slurm.tasks_per_node)
        _record_local_attempt(run, started_at, start_step, failure)
        return StageOutcome(
            "train",
            "failed",
            0.0,
            failure.summary,
            failure_exit_code(failure.kind.value, failure.retryable),
            facts={"log": str(exc.log), "failed_rank": exc.rank, "failure": failure.kind.value},
        )
    start, final = result.get("start_step"), result.get("final_step")
    if start != final or read_attempts(run):  # a launch that trained, or one after a failure
        _record_local_attempt(run, started_at, start_step, None, final)
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


def launch_failure(exc: LaunchFailed, log_dir: Path, nproc: int) -> Failure:
    """Why the local ranks failed, read from their logs as a SLURM job's are (a dataset that
    changed since validation: DATA, not retryable); the launcher's line (which rank, how it
    ended, its log) follows the verdict, or is the whole line where it names what storage refused
    (STORAGE: exit 5, not retried). What nothing recognises stays UNKNOWN with that line alone,
    retryable by a resume or an Airflow retry."""
    from ffjobs.local_ranks import rank_log
    from ffjobs.slurm.failures import FailureKind, classify_failure, read_rank_logs

    line = str(exc).splitlines()[0]
    codes = {exc.rank: exc.returncode} if exc.rank is not None else {}
    paths = {rank: rank_log(log_dir, rank) for rank in range(nproc)}
    logs = read_rank_logs(paths, exit_codes_by_rank=codes)
    failure = classify_failure(None, exc.returncode, logs)
    if failure.kind is FailureKind.UNKNOWN:
        return replace(failure, summary=line)
    if failure.kind is FailureKind.STORAGE and " on a storage error (" in line:
        advice = "not retried: free space or fix access, then resume the run"
        return replace(failure, summary=f"{line}; {advice}")
    return replace(failure, summary=f"{failure.summary}; {line}")


def _checkpoint_step(run: Run) -> int:
    from ffjobs.train.checkpoint import open_checkpoints

    ref = open_checkpoints(run.config, run.checkpoint_dir).latest_verified()
    return ref.step if ref else 0


def _record_local_attempt(
    run: Run,
    started_at: float,
    start_step: int,
    failure: Failure | None,
    final: int | None = None,
) -> None:
    """The launch that just ended as an attempt of the run, and the run's goodput so far."""
    attempt = local_attempt(
        run, started_at=started_at, start_step=start_step, failure=failure, final_step=final
    )
    logger = run.logger
    record_attempt(run, logger, attempt)
    logger.log_metrics({"goodput": run_goodput(run)}, step=attempt.number)
