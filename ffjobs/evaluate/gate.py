"""The gate before review: thresholds from ``evaluate.gate`` and no regression against the
registry's champion, evaluated now on the same set with the same encoder.

:func:`decide` is pure: metrics in, ``{"passed": bool, "reasons": [one line per check]}`` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from ffjobs.quality.config import GateConfig
from ffjobs.quality.metrics import BETTER_WHEN_HIGHER

UNCHANGED = "the target unchanged"


@dataclass
class GateDecision:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    """One line per check, e.g. ``identity_top1 0.150 > 0.000 (the target unchanged)``
    or ``psnr 18.10 < champion 19.40 - 0``."""
    failures: list[str] = field(default_factory=list)
    """The reasons of the checks that failed."""

    def to_dict(self) -> dict:
        return asdict(self)


def thresholds(gate: GateConfig, unchanged: Mapping[str, float]) -> dict[str, tuple[float, str]]:
    """``metric -> (bound, where it comes from)``. A set threshold is met by reaching it;
    retrieval left unset must beat ``unchanged["identity_top1"]``, what returning the target
    unchanged scores (strictly: reaching it means no identity moved)."""
    found = {}
    if gate.min_identity_top1 is None:
        found["identity_top1"] = (unchanged["identity_top1"], UNCHANGED)
    for metric, minimum in (
        ("identity_top1", gate.min_identity_top1),
        ("identity_cosine", gate.min_identity_cosine),
        ("psnr", gate.min_psnr),
        ("ssim", gate.min_ssim),
    ):
        if minimum is not None:
            found[metric] = (minimum, f"evaluate.gate.min_{metric}")
    return found


def decide(
    metrics: Mapping[str, float],
    gate: GateConfig,
    *,
    unchanged: Mapping[str, float],
    champion: Mapping[str, float] | None,
) -> GateDecision:
    """Check ``metrics`` against the thresholds (``unchanged``: the identity metrics of
    returning the target unchanged, see :func:`thresholds`) and the champion's metrics."""
    checks: list[tuple[bool, str]] = []
    for metric, (minimum, source) in thresholds(gate, unchanged).items():
        value = metrics[metric]
        strict = source == UNCHANGED
        ok = value > minimum if strict else value >= minimum
        sign = (">" if strict else ">=") if ok else ("<=" if strict else "<")
        checks.append((ok, f"{metric} {_num(value)} {sign} {_num(minimum)} ({source})"))
    for metric, theirs in (champion or {}).items():
        if metric not in metrics or metric not in gate.compare:
            continue
        ours, slack = metrics[metric], gate.max_regression
        if BETTER_WHEN_HIGHER[metric]:
            ok = ours >= theirs - slack
            sign, bound = (">=" if ok else "<"), f"champion {_num(theirs)} - {slack:g}"
        else:
            ok = ours <= theirs + slack
            sign, bound = ("<=" if ok else ">"), f"champion {_num(theirs)} + {slack:g}"
        checks.append((ok, f"{metric} {_num(ours)} {sign} {bound}"))
    failures = [line for ok, line in checks if not ok]
    return GateDecision(not failures, [line for _, line in checks], failures)


def _num(value: float) -> str:
    return f"{value:.2f}" if abs(value) >= 10 else f"{value:.3f}"
