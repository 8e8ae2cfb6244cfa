"""Configuration of the dataset: where it is, how it is validated, how it is fed to training."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "ignore"]


@dataclass(frozen=True)
class Check:
    """One validation check: what ``validation.severity`` names, its default severity, whether
    it judges a file or an identity (the rule itself is in :mod:`ffjobs.data.checks`)."""

    name: str
    severity: str
    scope: str  # "file" or "identity"
    description: str


_ALL = [
    Check("zero_byte", "error", "file", "file is empty"),
    Check("cannot_open", "error", "file", "not an image PIL can open (or unreadable)"),
    Check("truncated", "error", "file", "image data ends early"),
    Check("decode_error", "error", "file", "image cannot be fully decoded"),
    Check("unsupported_format", "error", "file", "format not in allowed_formats"),
    Check("extension_mismatch", "warning", "file", "file extension lies about the format"),
    Check("low_resolution", "error", "file", "shorter side below min_resolution"),
    Check("extreme_aspect", "warning", "file", "aspect ratio above max_aspect_ratio"),
    Check("non_rgb", "warning", "file", "grayscale, CMYK, 16-bit, palette or alpha image"),
    Check("decompression_bomb", "error", "file", "header claims more than max_pixels; not decoded"),
    Check("path_escape", "error", "file", "symlink or manifest path leaves the dataset root"),
    Check("missing_file", "error", "file", "manifest lists a file that does not exist"),
    Check("undecodable_name", "error", "file", "file name is not valid UTF-8; never read"),
    Check("exact_duplicate", "warning", "file", "same bytes as another file"),
    Check("near_duplicate", "warning", "file", "perceptual hash within near_duplicate_distance"),
    Check(
        "small_identity", "warning", "identity", "identity has fewer than min_images_per_identity"
    ),
    Check("identity_leakage", "error", "identity", "identity appears in more than one split"),
]
CHECKS: dict[str, Check] = {c.name: c for c in _ALL}


@dataclass
class SynthConfig:
    """The synthetic face identity dataset used by the demo, tests and benchmarks."""

    identities: int = field(default=24, metadata={"ge": 2})
    per_identity: int = field(default=8, metadata={"ge": 2})
    size: int = field(default=64, metadata={"ge": 32, "le": 1024})
    seed: int = 0


@dataclass
class ValidationConfig:
    """What ``ffjobs validate`` checks, how severe each finding is, and when the dataset fails."""

    min_resolution: int = field(default=32, metadata={"ge": 1})
    """Shorter image side below which an image is too small to train on."""
    max_aspect_ratio: float = field(default=2.0, metadata={"ge": 1.0})
    """Longer side / shorter side above which the aspect ratio is extreme."""
    max_pixels: int = field(default=50_000_000, metadata={"ge": 1})
    """Pixel count (from the header) above which a file is a decompression bomb; never decoded."""
    allowed_formats: list[str] = field(default_factory=lambda: ["JPEG", "PNG", "WEBP"])
    """Image formats (PIL names) accepted; anything else is ``unsupported_format``."""
    non_rgb_policy: Literal["convert", "reject"] = "convert"
    """Grayscale/CMYK/16-bit/alpha images: ``convert`` (a warning) or ``reject`` (an error)."""
    near_duplicate_distance: int = field(default=12, metadata={"ge": 0, "le": 64})
    """Largest Hamming distance between 256-bit dHashes that counts as a near duplicate."""
    min_images_per_identity: int = field(default=2, metadata={"ge": 1})
    """Identities with fewer images cannot form same-identity pairs."""
    severity: dict[str, Severity] = field(default_factory=dict)
    """Per-check severity overrides, e.g. {"exact_duplicate": "error", "extreme_aspect": "ignore"}."""
    max_bad_fraction: float = field(default=0.01, metadata={"ge": 0.0, "le": 1.0})
    """The dataset fails when more than this fraction of files has an error-severity finding."""
    workers: int = field(default=0, metadata={"ge": 0})
    """Processes that inspect images; 0: one per CPU core."""
    cache_dir: str | None = None
    """Incremental cache; default ``$FFJOBS_CACHE_DIR`` or ``$XDG_CACHE_HOME/ffjobs`` (~/.cache)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.severity) - set(CHECKS))
        if unknown:
            raise ValueError(f"severity: unknown check {unknown[0]!r}; known: {', '.join(CHECKS)}")


@dataclass
class DataConfig:
    source: str = "runs/data/synthetic"
    """Dataset root: a local directory or ``s3://bucket/prefix`` (endpoint: the ``s3:`` section)."""
    layout: Literal["auto", "identity_folders", "flat", "manifest"] = "auto"
    """How images map to identities; ``auto`` detects a manifest, then identity folders."""
    manifest: str | None = None
    """Manifest file (JSONL or CSV: path, identity, optional split), relative to ``source``."""
    synth: SynthConfig = field(default_factory=SynthConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    val_fraction: float = field(default=0.2, metadata={"ge": 0.0, "lt": 1.0})
    """Fraction of identities held out for validation when the dataset has no split column."""
    same_identity_prob: float = field(default=0.5, metadata={"ge": 0.0, "le": 1.0})
    """Probability that a training pair is (source, target) of the same identity."""
    num_workers: int = field(default=0, metadata={"ge": 0})
    """DataLoader worker processes per rank."""
    prefetch_factor: int = field(default=4, metadata={"ge": 1})
    """Batches each worker loads ahead (with ``num_workers`` > 0); workers persist across epochs."""
