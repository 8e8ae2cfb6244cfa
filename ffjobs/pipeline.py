"""``ffjobs run``: the whole pipeline in one command (validate -> preflight -> train).

The same stage functions back the single-stage commands; this module only chains them, stops
at the first stage that says no, records every stage in one MLflow run, and prints a summary.
Training logs into that same run (``FFJOBS_MLFLOW_RUN_ID``), so a pipeline run is one MLflow run.
The Airflow DAG runs the same stages one task each: ``start_pipeline_run`` in the first,
``attach_pipeline_run`` in the next, ``run_stage`` in every one, ``finish_pipeline_run`` last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.config import Config
from ffjobs.errors import ExitCode, UserError

STAGES = ("validate", "preflight", "train")


@dataclass
class StageOutcome:
    name: str
    status: str  # "passed", "failed" or "skipped"
    seconds: float
    summary: str
    exit_code: int = ExitCode.OK
    artifacts: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    """What later stages or an orchestrator need: fingerprint, verdict, report and checkpoint paths."""


@dataclass
class PipelineRun:
    config: Config
    run_dir: Path
    nproc: int
    tracker: Any  # ffjobs.tracking.mlflow_logger.RunLogger
    quiet_stdout: bool = False
    """Keep stdout for the final JSON: stages print their progress to stderr."""
    outcomes: list[StageOutcome] = field(default_factory=list)


# --------------------------------------------------------------------------- stages


def validate_stage(run: PipelineRun) -> StageOutcome:
    from ffjobs.data.report import write_report
    from ffjobs.data.validate import validate_dataset
    from ffjobs.train.commands import ensure_dataset

    data = run.config.data
    ensure_dataset(run.config)
    report = validate_dataset(
        data.source,
        data.validation,
        layout=data.layout,
        manifest=data.manifest,
        endpoint_url=run.config.s3.endpoint_url,
        region=run.config.s3.region,
    )
    paths = write_report(report, run.run_dir / "validation" / "report.json")
    # Training skips every file validation rejected.
    run.config.data.quarantine = str(paths["quarantine"])
    summary = (
        f"{report.files} images, {report.identities} identities, "
        f"{len(report.quarantine)} quarantined, fingerprint {report.fingerprint[:12]}"
    )
    if report.failures:
        summary += ": " + report.failures[0]
    return StageOutcome(
        "validate",
        "passed" if report.passed else "failed",
        0.0,
        summary,
        ExitCode.OK if report.passed else ExitCode.FAILED,
        artifacts=[str(p) for p in paths.values()],
        facts={"fingerprint": report.fingerprint, "report": str(paths["json"])},
    )


def preflight_stage(run: PipelineRun) -> StageOutcome:
    from ffjobs.preflight.runner import run_preflight

    if not run.config.preflight.enabled:
        return StageOutcome("preflight", "skipped", 0.0, "preflight.enabled is false")
    run.config.preflight.run_dir = str(run.run_dir / "preflight")
    report = run_preflight(run.config, local=run.config.slurm.executor == "local")
    verdict = report["verdict"]
    best = max((row.get("busbw_gbps", 0.0) for row in report.get("sweep", [])), default=0.0)
    summary = (
        f"{verdict} on {report['world_size']} ranks ({report['backend']}), "
        f"peak busbw {best:.2f} GB/s"
    )
    if report["reasons"]:
        summary += ": " + report["reasons"][0]
    return StageOutcome(
        "preflight",
        "failed" if verdict == "FAIL" else "passed",
        0.0,
        summary,
        ExitCode.FAILED if verdict == "FAIL" else ExitCode.OK,
        artifacts=list(report.get("artifacts", {}).values()),
        metrics={"preflight_peak_busbw_gbps": best},
        facts={"verdict": verdict, "report": report.get("artifacts", {}).get("json")},
    )


def train_stage(run: PipelineRun) -> StageOutcome:
    from ffjobs.tracking.mlflow_logger import RUN_ID_ENV
    from ffjobs.train.launch import LaunchFailed, launch_local

    if run.config.slurm.executor != "local":
        raise UserError(
            "slurm.executor: ffjobs run trains locally; submit to SLURM with the Airflow DAG "
            "or set --set slurm.executor=local"
        )
    if run.tracker.run_id:
        os.environ[RUN_ID_ENV] = run.tracker.run_id
    try:
        result = launch_local(run.config, run.nproc, quiet_stdout=run.quiet_stdout)
    except LaunchFailed as exc:
        return StageOutcome("train", "failed", 0.0, str(exc), ExitCode.FAILED)
    finally:
        os.environ.pop(RUN_ID_ENV, None)
    history = result.get("history") or [{}]
    last = history[-1]
    summary = (
        f"steps {result.get('start_step')} -> {result.get('final_step')} on "
        f"{result.get('world_size')} ranks"
        + (f", {last['images_per_s']:.1f} img/s" if "images_per_s" in last else "")
        + f"; checkpoint {result.get('last_checkpoint')}"
    )
    stopped = bool(result.get("stopped_early"))
    return StageOutcome(
        "train",
        "failed" if stopped else "passed",
        0.0,
        summary,
        ExitCode.RETRYABLE if stopped else ExitCode.OK,
        facts={"checkpoint": result.get("last_checkpoint"), "final_step": result.get("final_step")},
    )


STAGE_FUNCTIONS: dict[str, Callable[[PipelineRun], StageOutcome]] = {
    "validate": validate_stage,
    "preflight": preflight_stage,
    "train": train_stage,
}


# --------------------------------------------------------------------------- driver


def run_pipeline(
    config: Config,
    *,
    nproc: int,
    stages: tuple[str, ...] = STAGES,
    echo: Callable[[str], None] = print,
    quiet_stdout: bool = False,
) -> PipelineRun:
    """Run ``stages`` in order; stop at the first one that fails. Every stage is recorded."""
    run = start_pipeline_run(config, nproc=nproc, quiet_stdout=quiet_stdout)
    status = "FINISHED"
    try:
        for name in stages:
            if run_stage(run, name, echo).status == "failed":
                status = "FAILED"
                break
    except BaseException:
        status = "FAILED"
        raise
    finally:
        finish_pipeline_run(run, status)
    return run


def start_pipeline_run(config: Config, *, nproc: int, quiet_stdout: bool = False) -> PipelineRun:
    """Create the run directory (``runs/<name>-<stamp>``) and start the pipeline's MLflow run."""
    from ffjobs.tracking.mlflow_logger import RunLogger

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = Path("runs") / f"{config.name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(config.dump("json") + "\n")
    tracker = RunLogger(config.tracking, active=True)
    tracker.start(f"pipeline-{stamp}", config.to_dict())
    tracker.set_tags({"ffjobs.stage": "pipeline", "ffjobs.run_dir": str(run_dir)})
    return PipelineRun(config, run_dir, nproc, tracker, quiet_stdout)


def attach_pipeline_run(
    config: Config,
    run_dir: str | Path,
    mlflow_run_id: str | None,
    *,
    nproc: int,
    outcomes: Iterable[Mapping[str, Any]] = (),
    quiet_stdout: bool = False,
) -> PipelineRun:
    """Rebuild a run started elsewhere (an earlier Airflow task) and reopen its MLflow run."""
    from ffjobs.tracking.mlflow_logger import RunLogger

    tracker = RunLogger(config.tracking, active=True)
    if mlflow_run_id:
        tracker.start("pipeline", {}, run_id=mlflow_run_id)
    else:  # tracking disabled, or it failed when the run started: stay without it
        tracker.active = False
    run = PipelineRun(config, Path(run_dir), nproc, tracker, quiet_stdout)
    run.outcomes = [StageOutcome(**outcome) for outcome in outcomes]
    return run


def run_stage(run: PipelineRun, name: str, echo: Callable[[str], None] = print) -> StageOutcome:
    """Run one stage, time it, and record its status, metrics and artifacts in the MLflow run."""
    started = time.perf_counter()
    outcome = STAGE_FUNCTIONS[name](run)
    outcome.seconds = round(time.perf_counter() - started, 1)
    run.outcomes.append(outcome)
    echo(f"[{outcome.status:>7}] {name:<9} {outcome.seconds:6.1f}s  {outcome.summary}")
    run.tracker.log_metrics({f"{name}_seconds": outcome.seconds, **outcome.metrics}, step=0)
    run.tracker.set_tags({f"ffjobs.{name}": outcome.status})
    run.tracker.log_artifacts(outcome.artifacts, f"{name}")
    return outcome


def finish_pipeline_run(run: PipelineRun, status: str) -> None:
    """Write ``summary.json`` into the run directory and end the MLflow run with ``status``."""
    (run.run_dir / "summary.json").write_text(json.dumps(summary_dict(run), indent=2) + "\n")
    run.tracker.finish(status)


def summary_dict(run: PipelineRun) -> dict[str, Any]:
    failed = [o for o in run.outcomes if o.status == "failed"]
    return {
        "passed": not failed,
        "exit_code": int(failed[0].exit_code) if failed else 0,
        "run_dir": str(run.run_dir),
        "mlflow_run_id": run.tracker.run_id,
        "tracking_uri": run.config.tracking.tracking_uri if run.config.tracking.enabled else None,
        "stages": [asdict(o) for o in run.outcomes],
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the whole pipeline locally: validate -> preflight -> train",
        description="Chain the stages on this machine (default: the embedded local profile, "
        "CPU, synthetic data). Stops at the first stage that fails; every stage is recorded "
        "in one MLflow run.",
    )
    add_config_arguments(parser)
    add_json_argument(parser)
    parser.add_argument(
        "--nproc", type=int, default=2, metavar="N", help="local training ranks (default 2)"
    )
    parser.add_argument(
        "--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}"
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise UserError(
            f"--stages: unknown stage {unknown[0] if unknown else '(none)'}; "
            f"choose from {', '.join(STAGES)}"
        )
    if args.nproc < 1:
        raise UserError(f"--nproc: must be >= 1, got {args.nproc}")
    config = config_from_args(args)
    echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
    run = run_pipeline(config, nproc=args.nproc, stages=stages, echo=echo, quiet_stdout=args.json)
    summary = summary_dict(run)
    if args.json:
        print_json(summary)
    else:
        verdict = "passed" if summary["passed"] else "FAILED"
        print(
            f"pipeline {verdict}: outputs in {run.run_dir}"
            + (
                f"; MLflow run {run.tracker.run_id} at {summary['tracking_uri']}"
                if run.tracker.run_id
                else ""
            )
        )
    return summary["exit_code"]
