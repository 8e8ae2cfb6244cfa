"""The preflight stage: check the fabric the training will use before it starts."""

from __future__ import annotations

from datetime import UTC, datetime

from ffjobs.config import Config
from ffjobs.errors import ExitCode
from ffjobs.runs.run import Run, StageOutcome


def preflight_stage(config: Config, run: Run, *, sysfs_root: str | None = None) -> StageOutcome:
    """Run the preflight into ``<run>/preflight/<stamp>/``; fails on a FAIL verdict.

    Local ranks when ``slurm.executor`` is ``local``, else a SLURM job of the training job's
    shape. Facts: ``verdict``, ``report`` (JSON path), ``suspect_nodes``.
    """
    from ffjobs.preflight.runner import run_preflight

    if not config.preflight.enabled:
        return StageOutcome("preflight", "skipped", 0.0, "preflight.enabled is false")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    out_dir = run.stage_dir("preflight") / stamp
    report = run_preflight(
        config,
        out_dir,
        local=config.slurm.executor == "local",
        run_key=run.key,
        sysfs_root=sysfs_root,
    )
    verdict = report["verdict"]
    best = max((row.get("busbw_gbps", 0.0) for row in report.get("sweep", [])), default=0.0)
    summary = (
        f"{verdict} on {report['world_size']} ranks ({report['backend']}), "
        f"peak busbw {best:.2f} GB/s"
    )
    if report["reasons"]:
        summary += ": " + report["reasons"][0]
    failed = verdict == "FAIL"
    return StageOutcome(
        "preflight",
        "failed" if failed else "passed",
        0.0,
        summary,
        ExitCode.FAILED if failed else ExitCode.OK,
        artifacts=list(report.get("artifacts", {}).values()),
        metrics={"preflight_peak_busbw_gbps": best},
        facts={
            "verdict": verdict,
            "report": report.get("artifacts", {}).get("json"),
            "suspect_nodes": report.get("suspect_nodes", []),
        },
    )
