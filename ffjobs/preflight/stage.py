"""The preflight stage: check the fabric the training will use before it starts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ffjobs.config import Config
from ffjobs.errors import ExitCode
from ffjobs.runs.run import Run, StageOutcome


def preflight_stage(config: Config, run: Run, *, sysfs_root: str | None = None) -> StageOutcome:
    """Run the preflight into ``<run>/preflight/<stamp>/``; fails on a FAIL verdict.

    Local ranks when ``slurm.executor`` is ``local``, else a SLURM job of the training job's
    shape, waited for here (the Airflow operator defers instead: :func:`preflight_dir` and
    :func:`preflight_outcome` are its first and last steps too). Facts: ``verdict``, ``report``
    (JSON path), ``suspect_nodes``, ``exclude``.
    """
    from ffjobs.preflight.runner import run_preflight

    if not config.preflight.enabled:
        return StageOutcome("preflight", "skipped", 0.0, "preflight.enabled is false")
    report = run_preflight(
        config,
        preflight_dir(run),
        local=config.slurm.executor == "local",
        run_key=run.key,
        sysfs_root=sysfs_root,
    )
    return preflight_outcome(config, report)


def preflight_dir(run: Run) -> Path:
    """A new folder for one preflight of ``run``: ``<run>/preflight/<stamp>/`` (not created)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    return run.stage_dir("preflight") / stamp


def preflight_outcome(config: Config, report: dict) -> StageOutcome:
    """The stage's outcome for a preflight ``report``: failed on a FAIL verdict, unless the
    nodes it blames are ones the training job can do without (:func:`gated_nodes`)."""
    verdict = report["verdict"]
    best = max((row.get("busbw_gbps", 0.0) for row in report.get("sweep", [])), default=0.0)
    summary = (
        f"{verdict} on {report['world_size']} ranks ({report['backend']}), "
        f"peak busbw {best:.2f} GB/s"
    )
    if report["reasons"]:
        summary += ": " + report["reasons"][0]
    failed = verdict == "FAIL"
    exclude = gated_nodes(config, report) if failed else []
    if exclude:  # the failure is in nodes the training job can do without
        failed = False
        summary += f"; training excludes {', '.join(exclude)}"
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
            "exclude": exclude,
        },
    )


def gated_nodes(config: Config, report: dict, usable: list[str] | None = None) -> list[str]:
    """The nodes a FAIL verdict blames, when training can run without them; else ``[]``.

    Every FAIL finding must name a suspect node (a bad environment everywhere is not a bad
    node), except a bandwidth FAIL of the whole job when a node was singled out as slow: one
    slow node drags every all-reduce ring down to its pace. The partition (``usable``:
    ``sinfo``'s nodes unless given) minus the profile's exclude list and the suspects must
    still hold ``slurm.nodes`` nodes.
    """
    suspects = list(report.get("suspect_nodes") or [])
    fails = [f for f in report.get("findings", []) if f.get("level") == "FAIL"]
    if config.slurm.executor != "slurm" or not suspects or not fails:
        return []
    slow = any(f.get("check") in ("slow-node", "slow-link") for f in fails)
    if any(
        f.get("node") not in suspects and not (slow and f.get("check") == "bandwidth")
        for f in fails
    ):
        return []
    if usable is None:
        from ffjobs.train.slurm_job import partition_nodes

        usable = partition_nodes(config.slurm.partition)
    left = [n for n in usable or [] if n not in suspects and n not in config.slurm.exclude]
    return suspects if len(left) >= config.slurm.nodes else []
