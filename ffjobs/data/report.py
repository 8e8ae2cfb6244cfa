"""Renderings of a validation report: a terminal table, Markdown for MLflow, files on disk."""

from __future__ import annotations

import json
from pathlib import Path

from ffjobs.data.validate import ValidationReport


def _rows(report: ValidationReport) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, check in report.checks.items():
        if check["severity"] == "ignore":
            continue
        example = check["examples"][0] if check["examples"] else ""
        rows.append((name, check["severity"], str(check["count"]), example))
    return rows


def human_summary(report: ValidationReport) -> str:
    """A plain-text table of every check, then the verdict."""
    rows = [("check", "severity", "count", "example"), *_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        f"dataset {report.source} ({report.layout}): {report.files} files, "
        f"{report.identities} identities, fingerprint {report.fingerprint}"
    ]
    for i, row in enumerate(rows):
        marker = " " if i == 0 or row[2] == "0" else ("!" if row[1] == "error" else "~")
        lines.append(
            f"{marker} {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  "
            f"{row[2]:>{widths[2]}}  {row[3]}".rstrip()
        )
    histogram = ", ".join(f"{k}: {v}" for k, v in report.histogram.items())
    lines.append(f"images per identity: {histogram or 'none'}")
    lines.append(
        f"bad files: {report.bad_files} ({report.bad_fraction:.2%}, limit "
        f"{report.max_bad_fraction:.2%})"
    )
    timing = report.timing
    if timing:
        lines.append(
            f"time: {timing.get('total_s', 0):.2f} s ({timing.get('inspected', 0)} "
            f"inspected, {timing.get('cached', 0)} from cache)"
        )
    lines.append("PASSED" if report.passed else "FAILED: " + "; ".join(report.failures))
    return "\n".join(lines)


def markdown_summary(report: ValidationReport) -> str:
    """The report as Markdown, for an MLflow run's artifacts or a review page."""
    verdict = "passed" if report.passed else "**failed**"
    lines = [
        f"# Dataset validation: {verdict}",
        "",
        f"- source: `{report.source}` ({report.layout})",
        f"- fingerprint: `{report.fingerprint}`",
        f"- files: {report.files}, identities: {report.identities}, bad files: "
        f"{report.bad_files} ({report.bad_fraction:.2%}, limit {report.max_bad_fraction:.2%})",
        "",
    ]
    if report.failures:
        lines += ["## Failures", "", *[f"- {failure}" for failure in report.failures], ""]
    lines += [
        "## Checks",
        "",
        "| check | severity | count | examples |",
        "| --- | --- | --- | --- |",
    ]
    for name, severity, count, _ in _rows(report):
        shown = ", ".join(f"`{e}`" for e in report.checks[name]["examples"][:3])
        lines.append(f"| {name} | {severity} | {count} | {shown} |")
    lines += ["", "## Images per identity", "", "| images | identities |", "| --- | --- |"]
    lines += [f"| {bucket} | {n} |" for bucket, n in report.histogram.items()]
    return "\n".join(lines) + "\n"


def write_report(report: ValidationReport, json_path: str | Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``quarantine.txt`` (beside the JSON)."""
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": json_path,
        "markdown": json_path.with_suffix(".md"),
        "quarantine": json_path.parent / "quarantine.txt",
    }
    paths["json"].write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    paths["markdown"].write_text(markdown_summary(report))
    header = (
        f"# files the loader skips: error findings of dataset {report.fingerprint} "
        f"({report.source})\n"
    )
    paths["quarantine"].write_text(header + "".join(f"{p}\n" for p in report.quarantine))
    return paths
