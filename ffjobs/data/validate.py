"""``ffjobs validate``: prove a dataset is fit before any GPU is asked for.

Files are inspected in a process pool (every core), each read once and never held after its
facts are taken; facts are cached by (path, size, mtime/ETag) so an unchanged dataset is
re-validated without reading an image. The verdict is the policy in ``ValidationConfig``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ffjobs.config.data import ValidationConfig
from ffjobs.data import checks
from ffjobs.data.cache import FactsCache, FactsSnapshot
from ffjobs.data.index import (
    MANIFEST_NAMES,
    Layout,
    Record,
    ScanEntry,
    ValidatedFiles,
    dataset_fingerprint,
    layout_entries,
    manifest_version,
    validated_files,
)
from ffjobs.data.inspect import INSPECTOR_VERSION, Facts
from ffjobs.data.pool import InspectionPool
from ffjobs.data.sources import (
    FileStat,
    Source,
    is_image_path,
    is_text_path,
    open_source,
    path_bytes,
)

# Bump when a report's content changes for the same facts (a new check, a new field), so
# cached reports are rebuilt; cached facts stay valid (that is INSPECTOR_VERSION's job).
REPORT_VERSION = 2


@dataclass
class ValidationReport:
    """Everything ``ffjobs validate`` found; ``to_dict()`` is the JSON report."""

    source: str
    layout: str
    fingerprint: str
    files: int
    identities: int
    histogram: dict[str, int]
    checks: dict[str, dict[str, Any]]
    bad_files: int
    max_bad_fraction: float
    failures: list[str]
    quarantine: list[str]
    timing: dict[str, Any] = field(default_factory=dict)
    validated: ValidatedFiles | None = None
    """What training may read, by size and version (``validate_dataset(keep_files=True)``);
    not part of the JSON report."""

    @property
    def bad_fraction(self) -> float:
        return self.bad_files / self.files if self.files else 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def count(self, check: str) -> int:
        return self.checks[check]["count"]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationReport:
        return cls(
            source=data["source"],
            layout=data["layout"],
            fingerprint=data["fingerprint"],
            files=data["files"],
            identities=data["identities"],
            histogram=data["images_per_identity"],
            checks=data["checks"],
            bad_files=data["bad_files"],
            max_bad_fraction=data["max_bad_fraction"],
            failures=data["failures"],
            quarantine=data["quarantine"],
            timing=data.get("timing", {}),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "source": self.source,
            "layout": self.layout,
            "fingerprint": self.fingerprint,
            "files": self.files,
            "identities": self.identities,
            "images_per_identity": self.histogram,
            "bad_files": self.bad_files,
            "bad_fraction": round(self.bad_fraction, 6),
            "max_bad_fraction": self.max_bad_fraction,
            "failures": self.failures,
            "checks": self.checks,
            "quarantine": self.quarantine,
            "timing": self.timing,
        }


def inspect_files(
    source: Source,
    stats: list[FileStat],
    config: ValidationConfig,
    cache: FactsCache,
    progress: Callable[[int], None] | None = None,
    pool: InspectionPool | None = None,
    known: FactsSnapshot | None = None,
) -> tuple[dict[str, Facts], int]:
    """Facts of every file, from the cache where unchanged; returns ``(facts, inspected)``.

    ``pool`` may already be inspecting files offered while listing (their results are cached
    too); ``known`` is the cache snapshot those offers were checked against.
    """
    known = known or cache.snapshot()
    facts = known.facts(stats)
    if progress:
        progress(len(facts))
    todo = [s for s in stats if s.path not in facts]
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(InspectionPool(source, config))
        for chunk_result in pool.results(todo):
            for stat, file_facts, encoded in chunk_result:
                facts[stat.path] = file_facts
                cache.put(stat, file_facts, encoded)
            if progress:
                progress(len(chunk_result))
    return facts, len(todo)


def inspected_before_layout(
    source: Source, layout: Layout, manifest: str | None
) -> Callable[[FileStat], bool] | None:
    """Which files are sure to be inspected before the listing is complete (``None``: wait).

    Manifest rows decide which files count, so a manifest (given, or found at the root)
    means waiting. Without one, files in sub-folders are exactly what the identity-folders
    layout reads, and the flat layout has none of them. Names that are not UTF-8 are findings,
    never read.
    """
    if layout == "manifest" or manifest:
        return None
    if layout == "auto":
        for name in MANIFEST_NAMES:
            try:
                source.stat(name)
            except FileNotFoundError:
                continue
            except Exception:  # noqa: BLE001 - any other answer: let the full listing decide
                return None
            return None
    if layout == "flat":
        return lambda f: not f.escapes_root and is_image_path(f.path) and is_text_path(f.path)
    return lambda f: (
        not f.escapes_root and "/" in f.path and is_image_path(f.path) and is_text_path(f.path)
    )


def cache_salt(config: ValidationConfig) -> str:
    """What cached facts depend on besides the file: inspector version and limits."""
    formats = ",".join(sorted(config.allowed_formats))
    return f"{INSPECTOR_VERSION}:{config.max_pixels}:{formats}"


def listing_digest(
    layout: str, manifest: str, listing: list[FileStat], config: ValidationConfig
) -> str:
    """Digest of everything a report depends on: policy, layout, manifest and every file's
    version. Taken over the raw listing, so an unchanged dataset skips even its layout; paths
    as their bytes, so names that are not UTF-8 count too."""
    digest = hashlib.sha256(
        json.dumps(
            [INSPECTOR_VERSION, REPORT_VERSION, layout, manifest, dataclasses.asdict(config)],
            sort_keys=True,
            default=str,
        ).encode()
    )
    digest.update(
        path_bytes(
            "\n".join(f"{f.path}\t{f.size}\t{f.version}\t{f.escapes_root:d}" for f in listing)
        )
    )
    return digest.hexdigest()


def _file_checks(
    entries: list[ScanEntry], facts: dict[str, Facts], config: ValidationConfig
) -> dict[str, list[str]]:
    """``{check: [paths]}`` for per-file checks and duplicates, ignoring ``ignore`` checks."""
    found: dict[str, list[str]] = defaultdict(list)
    for entry in entries:
        entry_facts = (
            facts.get(entry.path, {}) if entry.problem is None else {"error": entry.problem}
        )
        for check in checks.file_findings(entry.path, entry_facts, config):
            found[check].append(entry.path)
    unusable = {p for name in checks.FATAL_FACTS for p in found.get(name, ())}
    hashes = {
        e.path: facts[e.path]["sha256"]
        for e in entries
        if e.path not in unusable and "sha256" in facts.get(e.path, {})
    }
    copies = checks.exact_duplicates(hashes)
    found["exact_duplicate"] = [
        f"{copy} (same bytes as {original})" for copy, original in sorted(copies.items())
    ]
    dhashes = {e.path: facts[e.path].get("dhash") for e in entries if e.path in hashes}
    near = checks.near_duplicates(dhashes, config.near_duplicate_distance, exclude=copies)
    found["near_duplicate"] = [
        f"{later} (looks like {earlier})" for later, earlier in sorted(near.items())
    ]
    return {
        name: paths for name, paths in found.items() if checks.severity_of(name, config) != "ignore"
    }


def _path_of(finding: str) -> str:
    return finding.split(" (", 1)[0]


def judge(
    source: str,
    layout: str,
    entries: list[ScanEntry],
    facts: dict[str, Facts],
    config: ValidationConfig,
) -> ValidationReport:
    """Apply the policy to the facts: findings per check, quarantine, fingerprint, verdict."""
    found = _file_checks(entries, facts, config)
    quarantine = sorted(
        {
            _path_of(item)
            for name, items in found.items()
            if checks.severity_of(name, config) == "error"
            for item in items
        }
    )
    bad = set(quarantine)
    usable = [e for e in entries if e.path not in bad]
    counts = Counter(e.identity for e in usable)
    splits: dict[str, set] = defaultdict(set)
    for e in usable:
        splits[e.identity].add(e.split)
    identity_found = {
        "small_identity": checks.small_identities(counts, config.min_images_per_identity),
        "identity_leakage": checks.leaking_identities(splits),
    }
    found.update(
        {k: v for k, v in identity_found.items() if checks.severity_of(k, config) != "ignore"}
    )
    report_checks = {}
    failures = []
    for name, check in checks.CHECKS.items():
        severity = checks.severity_of(name, config)
        items = found.get(name, [])
        report_checks[name] = {
            "severity": severity,
            "count": len(items),
            "examples": checks.examples(items),
            "description": check.description,
        }
        if items and severity == "error" and check.scope == "identity":
            failures.append(f"{name}: {len(items)} identities, e.g. {', '.join(items[:3])}")
    files = len(entries)
    if files == 0:
        failures.append("dataset is empty: no image files found under the layout")
    elif len(bad) / files > config.max_bad_fraction:
        failures.append(
            f"bad files: {len(bad)}/{files} = {len(bad) / files:.2%} > "
            f"max_bad_fraction {config.max_bad_fraction:.2%}"
        )
    records = [
        Record(e.path, e.identity, e.split, e.stat.size, facts[e.path]["sha256"])
        for e in usable
        if e.stat is not None and "sha256" in facts.get(e.path, {})
    ]
    return ValidationReport(
        source=source,
        layout=layout,
        fingerprint=dataset_fingerprint(records),
        files=files,
        identities=len(counts),
        histogram=checks.identity_histogram(counts.values()),
        checks=report_checks,
        bad_files=len(bad),
        max_bad_fraction=config.max_bad_fraction,
        failures=failures,
        quarantine=quarantine,
    )


def validate_dataset(
    source: str | Path | Source,
    config: ValidationConfig | None = None,
    layout: Layout = "auto",
    manifest: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    keep_files: bool = False,
) -> ValidationReport:
    """Validate a dataset (local path, ``s3://`` or a :class:`Source`) under ``config``'s policy.

    ``progress(done, total)`` is called as files are checked. ``keep_files``: also keep what
    training may read of the listing just validated, as ``report.validated``.
    """
    config = config or ValidationConfig()
    started = time.perf_counter()
    src = open_source(source, endpoint_url=endpoint_url, region=region)
    done = total = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    with (
        FactsCache.open(config.cache_dir, src.uri, cache_salt(config)) as cache,
        InspectionPool(src, config) as pool,
    ):
        # A source validated before most likely changed little: its cached report or facts
        # answer for it, and looking anything up while listing would only slow that down. A
        # new one is read in full, so reading starts while it is being listed.
        early = None if cache.has_report() else inspected_before_layout(src, layout, manifest)
        known = cache.snapshot() if early is not None else None

        listing = []
        for f in src.list():
            listing.append(f)
            if early is not None and known is not None and early(f) and not known.fresh(f):
                pool.offer(f)
        listed = time.perf_counter()
        # An unchanged listing under the same policy gives the same report: skip even the
        # layout, the per-file lookups and the duplicate search.
        digest = listing_digest(layout, manifest_version(src, manifest), listing, config)
        cached = cache.report_for(digest)
        entries: list[ScanEntry] | None = None
        if cached is not None:
            report = ValidationReport.from_dict(cached)
            inspected = 0
            checked = time.perf_counter()
            total = report.files
            tick(total)
        else:
            resolved, entries = layout_entries(src, listing, layout, manifest)
            stats = list({e.path: e.stat for e in entries if e.problem is None and e.stat}.values())
            total = len(stats)
            facts, inspected = inspect_files(src, stats, config, cache, tick, pool, known)
            checked = time.perf_counter()
            report = judge(src.uri, resolved, entries, facts, config)
            cache.put_report(digest, report.to_dict())
    if keep_files:
        if entries is None:  # the cached report's listing: its layout is cheap, nothing is read
            entries = layout_entries(src, listing, layout, manifest)[1]
        report.validated = validated_files(src.uri, report.fingerprint, entries, report.quarantine)
    finished = time.perf_counter()
    report.timing = {
        "list_s": round(listed - started, 4),
        "inspect_s": round(checked - listed, 4),
        "judge_s": round(finished - checked, 4),
        "total_s": round(finished - started, 4),
        "inspected": inspected,
        "cached": total - inspected,
        "report_cached": cached is not None,
    }
    return report
