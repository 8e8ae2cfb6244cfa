"""The validation checks: the rules that judge cached facts (their names and default
severities, :data:`CHECKS`, are in :mod:`ffjobs.config.data`, beside the policy that names them).

Per-file checks turn one file's facts into findings; dataset checks look across files
(duplicates, identities, splits). Severity is policy: ``error`` findings on a file put it in
quarantine (the loader skips it), identity-level errors fail the dataset outright,
``warning`` is reported only, ``ignore`` turns a check off.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ffjobs.config.data import CHECKS, Check

if TYPE_CHECKING:
    import numpy as np

    from ffjobs.config.data import ValidationConfig

__all__ = ["CHECKS", "Check"]  # the catalog lives with the policy that names its checks


EXTENSION_FORMATS = {
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".png": "PNG",
    ".webp": "WEBP",
    ".bmp": "BMP",
    ".gif": "GIF",
    ".tif": "TIFF",
    ".tiff": "TIFF",
}
# Findings that make the file unusable whatever the policy: no content to judge further.
FATAL_FACTS = frozenset(
    {
        "zero_byte",
        "cannot_open",
        "truncated",
        "decode_error",
        "unsupported_format",
        "decompression_bomb",
        "path_escape",
        "missing_file",
        "undecodable_name",
    }
)


def severity_of(check: str, config: ValidationConfig) -> str:
    """The configured severity of a check (``error``, ``warning`` or ``ignore``)."""
    if check in config.severity:
        return config.severity[check]
    if check == "non_rgb":
        return "error" if config.non_rgb_policy == "reject" else "warning"
    return CHECKS[check].severity


def file_findings(path: str, facts: Mapping, config: ValidationConfig) -> list[str]:
    """Per-file checks that fire on one file's facts."""
    found = []
    if facts.get("error"):
        found.append(facts["error"])
    image_format = facts.get("format")
    expected = EXTENSION_FORMATS.get(posixpath.splitext(path)[1].lower())
    if image_format and expected and image_format != expected:
        found.append("extension_mismatch")
    if facts.get("error") in FATAL_FACTS or not facts.get("width"):
        return found
    width, height = facts["width"], facts["height"]
    if min(width, height) < config.min_resolution:
        found.append("low_resolution")
    if max(width, height) / max(1, min(width, height)) > config.max_aspect_ratio:
        found.append("extreme_aspect")
    if facts.get("mode") != "RGB":
        found.append("non_rgb")
    return found


def exact_duplicates(hashes: Mapping[str, str]) -> dict[str, str]:
    """``{copy: original}`` for files with the same content hash (the first path is original)."""
    first: dict[str, str] = {}
    copies = {}
    for path in sorted(hashes):
        original = first.setdefault(hashes[path], path)
        if original != path:
            copies[path] = original
    return copies


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits of each element of a 1-D unsigned integer array, as ``uint8``."""
    import numpy as np

    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(words)
    octets = np.unpackbits(words.view(np.uint8).reshape(len(words), words.itemsize), axis=1)
    return octets.sum(axis=1, dtype=np.uint8)


PAIR_BATCH = 1 << 20
"""Candidate pairs compared at once: bounds memory when one band bucket is huge (flat images)."""


def _band_keys(bits: np.ndarray) -> np.ndarray:
    """One integer per row naming its bits (rows with equal bits get equal keys)."""
    import numpy as np

    packed = np.packbits(bits, axis=1)
    if packed.shape[1] <= 8:
        # Integer keys sort several times faster than the byte strings np.unique would compare.
        padded = np.zeros((len(bits), 8), dtype=np.uint8)
        padded[:, : packed.shape[1]] = packed
        return padded.view(np.uint64).reshape(-1)
    packed = np.ascontiguousarray(packed)
    strings = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
    return np.unique(strings, return_inverse=True)[1].reshape(-1)


def near_duplicates(
    dhashes: Mapping[str, str | None], max_distance: int, exclude: Iterable[str] = ()
) -> dict[str, str]:
    """``{later: earlier}`` for images whose hex dHashes differ in at most ``max_distance`` bits.

    Pigeonhole banding: two hashes within ``d`` bits agree exactly on at least one of ``d + 1``
    bands, so only files sharing a band value become candidate pairs (near-linear instead of
    quadratic). Band ``j`` is every ``(d + 1)``-th bit from ``j``: spread over the whole image,
    not one strip of it, because aligned faces on plain backgrounds share whole strips (a band
    of the top rows put 500 files in one bucket; strided bands give 17x fewer candidates).
    Every candidate pair of a band is generated and compared in a few numpy calls, one 64-bit
    word at a time, dropping those already too far apart: most fail on the first word.
    """
    import numpy as np  # here, not at module level: config loading imports this module

    skip = set(exclude)
    paths = sorted(p for p in dhashes if p not in skip and dhashes[p])
    if len(paths) < 2:
        return {}
    count = len(paths)
    words = np.frombuffer(b"".join(bytes.fromhex(dhashes[p]) for p in paths), np.uint8)
    words = words.reshape(count, -1)
    bits = np.unpackbits(words, axis=1)
    wide = words.view(np.uint64) if words.shape[1] % 8 == 0 else words  # fewer, wider XORs
    columns = [np.ascontiguousarray(wide[:, j]) for j in range(wide.shape[1])]
    earliest = np.full(count, count, dtype=np.int64)  # count: no match
    position_of = np.arange(count)
    counter = np.uint8 if max_distance <= 191 else np.uint16
    for band in range(max_distance + 1):
        keys = _band_keys(bits[:, band :: max_distance + 1])
        order = np.argsort(keys, kind="stable")  # bucket members adjacent, ascending index
        sorted_keys = keys[order]
        bucket_end = np.append(np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1, count)
        sizes = np.diff(bucket_end, prepend=0)
        after = np.repeat(bucket_end, sizes) - position_of - 1  # members after each one
        firsts = np.flatnonzero(after)
        pairs_before = np.cumsum(after[firsts]) - after[firsts]
        order32 = order.astype(np.int32)  # half the memory traffic of int64 indices
        done = 0
        while done < len(firsts):
            stop = max(
                done + 1, int(np.searchsorted(pairs_before, pairs_before[done] + PAIR_BATCH))
            )
            n = after[firsts[done:stop]]
            first = np.repeat(firsts[done:stop].astype(np.int32), n)
            step = np.arange(1, len(first) + 1, dtype=np.int32) - np.repeat(
                (np.cumsum(n) - n).astype(np.int32), n
            )
            a, b = order32[first], order32[first + step]  # a < b: the stable sort kept order
            # Survivors are <= max_distance before each word adds at most 64 bits more.
            distance = _popcount(columns[0][a] ^ columns[0][b]).astype(counter, copy=False)
            for column in columns[1:]:
                close = distance <= max_distance
                a, b, distance = a[close], b[close], distance[close]
                distance += _popcount(column[a] ^ column[b])
            close = distance <= max_distance
            np.minimum.at(earliest, b[close], a[close])
            done = stop
    return {
        paths[later]: paths[earlier]
        for later, earlier in enumerate(earliest.tolist())
        if earlier < count
    }


def identity_histogram(counts: Iterable[int]) -> dict[str, int]:
    """Images-per-identity histogram in power-of-two buckets (``1``, ``2-3``, ``4-7``...)."""
    histogram: dict[str, int] = {}
    for n in sorted(counts):
        low = 1 << (n.bit_length() - 1)
        label = str(low) if low == 1 else f"{low}-{2 * low - 1}"
        histogram[label] = histogram.get(label, 0) + 1
    return histogram


def leaking_identities(splits: Mapping[str, set[str]]) -> list[str]:
    """Identities that appear in more than one split (train, val, test)."""
    return sorted(identity for identity, seen in splits.items() if len(seen - {None}) > 1)


def small_identities(counts: Mapping[str, int], minimum: int) -> list[str]:
    return sorted(identity for identity, n in counts.items() if n < minimum)


def examples(items: Sequence[str], limit: int = 5) -> list[str]:
    return list(items[:limit])
