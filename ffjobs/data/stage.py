"""The validation stage: check the dataset before anything trains on it."""

from __future__ import annotations

from ffjobs.config import Config
from ffjobs.errors import ExitCode
from ffjobs.runs.run import Run, StageOutcome, check_dataset_fingerprint


def validate_stage(config: Config, run: Run) -> StageOutcome:
    """Validate ``data.source`` into ``<run>/validation/``; fails when the policy fails.

    Facts: ``fingerprint``, ``report`` (JSON path), ``quarantine`` (the file listing what
    training skips) and ``validated_files`` (what training may read, each file's size and
    version: the ranks refuse a dataset that differs). A resumed run whose data changed is
    refused here.
    """
    from ffjobs.data.demo import ensure_demo_dataset
    from ffjobs.data.index import write_validated_files
    from ffjobs.data.progress import ProgressLine
    from ffjobs.data.report import write_report
    from ffjobs.data.validate import validate_dataset

    data = config.data
    ensure_demo_dataset(config)
    report = validate_dataset(
        data.source,
        data.validation,
        layout=data.layout,
        manifest=data.manifest,
        progress=ProgressLine("validate"),
        endpoint_url=config.s3.endpoint_url,
        region=config.s3.region,
        keep_files=True,
    )
    check_dataset_fingerprint(run, report.fingerprint)
    paths = write_report(report, run.stage_dir("validation") / "report.json")
    assert report.validated is not None
    files = write_validated_files(report.validated, paths["json"].parent / "files.jsonl.gz")
    run.logger.log_dataset(
        name=dataset_name(data.source),
        digest=report.fingerprint,
        source=data.source,
        profile={
            "files": report.files,
            "identities": report.identities,
            "bad_files": report.bad_files,
            "quarantined": len(report.quarantine),
            "bad_fraction": report.bad_fraction,
            "passed": report.passed,
        },
    )
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
        metrics={"validation_bad_fraction": report.bad_fraction},
        facts={
            "fingerprint": report.fingerprint,
            "report": str(paths["json"]),
            "quarantine": str(paths["quarantine"]),
            "validated_files": str(files),
        },
    )


def dataset_name(source: str) -> str:
    """The dataset's name in MLflow: the last part of its path or ``s3://`` prefix."""
    return source.rstrip("/").rsplit("/", 1)[-1] or source
