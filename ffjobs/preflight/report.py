"""Assemble the preflight report from the per-rank result files and the NCCL logs of a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ffjobs.config.preflight import PreflightConfig
from ffjobs.preflight.findings import Finding, verdict_of
from ffjobs.preflight.nccl_log import parse_nccl_logs
from ffjobs.preflight.verdict import (
    check_bandwidth,
    check_transports,
    check_versions,
    suspect_nodes,
)
from ffjobs.preflight.worker import NCCL_LOG_DIR, RANKS_DIR

REPORT_JSON = "report.json"
SUMMARY_MD = "summary.md"
PLOT_PNG = "busbw.png"


def _read_ranks(run_dir: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted((run_dir / RANKS_DIR).glob("rank-*.json")):
        try:
            records.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            continue
    return records


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: set[Finding] = set()
    return [f for f in findings if not (f in seen or seen.add(f))]


def build_report(
    run_dir: Path,
    cfg: PreflightConfig,
    world_size: int,
    backend: str,
    launch_error: str | None = None,
) -> dict[str, Any]:
    """Judge one run: environment, versions, transports, bandwidth, slow nodes -> verdict."""
    records = _read_ranks(run_dir)
    by_rank = {r["rank"]: r for r in records}
    findings: list[Finding] = []
    if launch_error:
        findings.append(Finding("FAIL", "launch", launch_error))
    for record in records:
        findings += [Finding(**f) for f in record.get("env_findings", [])]
    probes = {
        r["probe"]["node"]: r["probe"]
        for r in records
        if r.get("probe") and r.get("local_rank") == 0
    }
    findings += check_versions(probes)
    aborted = any(r.get("status") == "aborted" for r in records)
    for record in records:
        if record.get("status") == "error":
            findings.append(
                Finding(
                    "FAIL",
                    "rank",
                    f"rank {record['rank']} failed: {record.get('error')}",
                    record.get("node"),
                )
            )
    missing = [r for r in range(world_size) if r not in by_rank]
    if missing and not launch_error:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        findings.append(
            Finding(
                "FAIL", "rank", f"no result from rank(s) {shown}; see the job logs under {run_dir}"
            )
        )
    log = parse_nccl_logs(sorted((run_dir / NCCL_LOG_DIR).glob("*.log")))
    leader = by_rank.get(0, {})
    sweep = leader.get("sweep", [])
    group_checks: dict[str, Any] = {}
    for record in records:
        group_checks.update(record.get("group_checks", {}))
    nodes = sorted({r.get("node") for r in records if r.get("node")})
    suspects: list[str] = []
    if not aborted and sweep:
        multi_node = len(nodes) > 1
        if backend == "nccl":
            findings += check_transports(log, cfg, multi_node)
        findings += check_bandwidth(sweep, cfg)
        suspects, slow = suspect_nodes(group_checks, cfg.suspect_ratio)
        findings += slow
    findings = _unique(findings)
    suspects = sorted(
        set(suspects)
        | {
            f.node
            for f in findings
            if f.level == "FAIL"
            and f.node
            and f.check in ("ib", "rank", "versions")
            and "," not in f.node
        }
    )
    verdict = verdict_of(findings)
    stamps = leader.get("timestamps", {})
    phases = {
        f"{a}->{b}": round(stamps[b] - stamps[a], 3)
        for a, b in zip(list(stamps), list(stamps)[1:], strict=False)
    }
    return {
        "verdict": verdict,
        "reasons": [f.line() for f in findings if f.level != "PASS"],
        "suspect_nodes": suspects,
        "stopped_before_collectives": aborted,
        "backend": backend,
        "world_size": world_size,
        "nodes": nodes,
        "dtype": leader.get("world", {}).get("dtype"),
        "sweep": sweep,
        "group_checks": group_checks,
        "nccl": log.to_dict(),
        "probes": probes,
        "findings": [f.to_dict() for f in findings],
        "thresholds": {
            "min_busbw_gbps": cfg.min_busbw_gbps,
            "expected_intra_node": cfg.expected_intra_node,
            "expected_inter_node": cfg.expected_inter_node,
            "expected_ib_rate_gbps": cfg.expected_ib_rate_gbps,
        },
        "rank0_phases_s": phases,
        "_rank0_start": stamps.get("start"),
        "run_dir": str(run_dir),
    }


def _human_size(size_bytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes:g} B"


def summary_markdown(report: dict[str, Any]) -> str:
    """A short Markdown summary: verdict, reasons, suspect nodes, the sweep table."""
    lines = [
        f"# Preflight: {report['verdict']}",
        "",
        f"{report['world_size']} ranks on {len(report['nodes'])} node(s) "
        f"({', '.join(report['nodes']) or 'none'}), backend {report['backend']}, "
        f"dtype {report['dtype'] or '-'}.",
        "",
    ]
    if report["reasons"]:
        lines += ["## Reasons", ""] + [f"- {r}" for r in report["reasons"]] + [""]
    if report["suspect_nodes"]:
        lines += [
            f"**Suspect nodes** (exclude from training): {', '.join(report['suspect_nodes'])}",
            "",
        ]
    transports = report["nccl"]["transports"]
    if any(transports.values()):
        lines += ["## Transports", ""]
        for scope, kinds in transports.items():
            for kind, vias in kinds.items():
                lines.append(f"- {scope}-node: {kind} ({', '.join(vias)})")
        lines.append("")
    if report["sweep"]:
        lines += [
            "## All-reduce sweep",
            "",
            "| size | iters | time (us) | algbw (GB/s) | busbw (GB/s) | minimum |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        minimums = {float(k): v for k, v in report["thresholds"]["min_busbw_gbps"].items()}
        for row in report["sweep"]:
            minimum = minimums.get(round(row["size_bytes"] / 2**20, 6))
            lines.append(
                f"| {_human_size(row['size_bytes'])} | {row['iters']} | "
                f"{row['time_s'] * 1e6:.1f} | {row['algbw_gbps']:.2f} | "
                f"{row['busbw_gbps']:.2f} | {'' if minimum is None else f'{minimum:g}'} |"
            )
        lines.append("")
    if report["group_checks"]:
        lines += [
            "## Per-node and node-pair checks",
            "",
            "| group | ranks | busbw (GB/s) |",
            "| --- | ---: | ---: |",
        ]
        for label, row in sorted(report["group_checks"].items()):
            lines.append(f"| {label} | {len(row['ranks'])} | {row['busbw_gbps']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def write_report(report: dict[str, Any], run_dir: Path) -> dict[str, str]:
    """Write report.json, summary.md and busbw.png into ``run_dir``; return their paths."""
    from ffjobs.preflight.plot import plot_busbw

    paths = {"json": run_dir / REPORT_JSON, "markdown": run_dir / SUMMARY_MD}
    report["artifacts"] = {k: str(v) for k, v in paths.items()}
    if report["sweep"]:
        paths["plot"] = run_dir / PLOT_PNG
        report["artifacts"]["plot"] = str(paths["plot"])
        minimums = {float(k) * 2**20: v for k, v in report["thresholds"]["min_busbw_gbps"].items()}
        plot_busbw(
            {"all ranks": report["sweep"]},
            minimums,
            paths["plot"],
            title=f"all-reduce busbw, {report['world_size']} ranks: {report['verdict']}",
        )
    paths["markdown"].write_text(summary_markdown(report), encoding="utf-8")
    paths["json"].write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return {k: str(v) for k, v in paths.items()}
