"""``ffjobs validate``: prove a dataset is fit before any GPU is asked for.

Files are inspected in a process pool (every core), each read once and never held after its
facts are taken; facts are cached by (path, size, mtime/ETag) so an unchanged dataset is
re-validated without reading an image. The verdict is the policy in ``ValidationConfig``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ffjobs.data import checks
from ffjobs.data.cache import FactsCache
from ffjobs.data.config import ValidationConfig
from ffjobs.data.index import Layout, Record, ScanEntry, dataset_fingerprint, scan
from ffjobs.data.inspect import (
    INSPECTOR_VERSION,
    Facts,
    init_worker,
    inspect_chunk,
    inspect_file,
)
from ffjobs.data.sources import FileStat, Source, open_source

CHUNK = 32
"""Files per worker task: large enough to amortise inter-process traffic, small enough to balance."""


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


def _pool_context() -> multiprocessing.context.BaseContext:
    # fork starts workers in milliseconds; it is only safe while this process has no threads.
    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def inspect_files(
    source: Source,
    stats: list[FileStat],
    config: ValidationConfig,
    cache: FactsCache,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, Facts], int]:
    """Facts of every file, from the cache where unchanged; returns ``(facts, inspected)``."""
    formats = frozenset(config.allowed_formats)
    facts = cache.lookup(stats)
    if progress:
        progress(len(facts))
    by_path = {s.path: s for s in stats}
    todo = [s.path for s in stats if s.path not in facts]
    workers = config.workers or len(os.sched_getaffinity(0))
    if workers == 1 or len(todo) <= CHUNK:
        results: Iterator[list[tuple[str, Facts, str | None]]] = (
            [(p, inspect_file(source, p, config.max_pixels, formats), None) for p in chunk]
            for chunk in _chunks(todo, CHUNK)
        )
        pool = None
    else:
        pool = _pool_context().Pool(
            min(workers, len(todo) // CHUNK + 1), init_worker, (source, config.max_pixels, formats)
        )
        results = pool.imap_unordered(inspect_chunk, _chunks(todo, CHUNK))
    try:
        for chunk_result in results:
            for path, file_facts, encoded in chunk_result:
                facts[path] = file_facts
                cache.put(by_path[path], file_facts, encoded)
            if progress:
                progress(len(chunk_result))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return facts, len(todo)


def cache_salt(config: ValidationConfig) -> str:
    """What cached facts depend on besides the file: inspector version and limits."""
    formats = ",".join(sorted(config.allowed_formats))
    return f"{INSPECTOR_VERSION}:{config.max_pixels}:{formats}"


def listing_digest(layout: str, entries: list[ScanEntry], config: ValidationConfig) -> str:
    """Digest of everything a report depends on: policy, layout and every file's version."""
    digest = hashlib.sha256(
        json.dumps(
            [INSPECTOR_VERSION, layout, dataclasses.asdict(config)], sort_keys=True, default=str
        ).encode()
    )
    digest.update(
        "\n".join(
            f"{e.path}\t{e.identity}\t{e.split}\t{e.problem}\t"
            f"{e.stat.size if e.stat else ''}\t{e.stat.version if e.stat else ''}"
            for e in entries
        ).encode()
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
) -> ValidationReport:
    """Validate a dataset (local path, ``s3://`` or a :class:`Source`) under ``config``'s policy.

    ``progress(done, total)`` is called as files are checked.
    """
    config = config or ValidationConfig()
    started = time.perf_counter()
    src = open_source(source, endpoint_url=endpoint_url, region=region)
    resolved, entries = scan(src, layout, manifest)
    listed = time.perf_counter()
    stats = list({e.path: e.stat for e in entries if e.problem is None and e.stat}.values())
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, len(stats))

    with FactsCache.open(config.cache_dir, src.uri, cache_salt(config)) as cache:
        # An unchanged listing under the same policy gives the same report: skip even the
        # per-file lookups and the duplicate search.
        listing = listing_digest(resolved, entries, config)
        cached = cache.report_for(listing)
        if cached is not None:
            report = ValidationReport.from_dict(cached)
            inspected = 0
            checked = time.perf_counter()
            tick(len(stats))
        else:
            facts, inspected = inspect_files(src, stats, config, cache, tick)
            checked = time.perf_counter()
            report = judge(src.uri, resolved, entries, facts, config)
            cache.put_report(listing, report.to_dict())
    finished = time.perf_counter()
    report.timing = {
        "list_s": round(listed - started, 4),
        "inspect_s": round(checked - listed, 4),
        "judge_s": round(finished - checked, 4),
        "total_s": round(finished - started, 4),
        "inspected": inspected,
        "cached": len(stats) - inspected,
        "report_cached": cached is not None,
    }
    return report
