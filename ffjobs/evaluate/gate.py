"""The gate before review: thresholds from ``evaluate.gate`` and no regression against the
registry's champion, evaluated now on the same set with the same encoder.

:func:`decide` is pure: metrics in, ``{"passed": bool, "reasons": [one line per check]}`` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from ffjobs.evaluate.config import GateConfig
from ffjobs.evaluate.metrics import BETTER_WHEN_HIGHER


@dataclass
class GateDecision:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    """One line per check, e.g. ``identity_top1 0.625 > 0.200 (chance, 1 of 5 identities)``
    or ``psnr 18.10 < champion 19.40 - 0``."""
    failures: list[str] = field(default_factory=list)
    """The reasons of the checks that failed."""

    def to_dict(self) -> dict:
        return asdict(self)


def thresholds(gate: GateConfig, identities: int) -> dict[str, tuple[float, str]]:
    """``metric -> (minimum, where it comes from)``; retrieval defaults to beating chance."""
    found = {}
    if gate.min_identity_top1 is None:
        found["identity_top1"] = (1.0 / identities, f"chance, 1 of {identities} identities")
    else:
        found["identity_top1"] = (gate.min_identity_top1, "evaluate.gate.min_identity_top1")
    for metric, minimum in (
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
    identities: int,
    champion: Mapping[str, float] | None,
) -> GateDecision:
    """Check ``metrics`` against the thresholds and, if given, the champion's metrics."""
    checks: list[tuple[bool, str]] = []
    for metric, (minimum, source) in thresholds(gate, identities).items():
        value = metrics[metric]
        # chance is beaten only by doing better than it; a set threshold is met by reaching it
        strict = source.startswith("chance")
        ok = value > minimum if strict else value >= minimum
        sign = (">" if strict else ">=") if ok else ("<=" if strict else "<")
        checks.append((ok, f"{metric} {_num(value)} {sign} {_num(minimum)} ({source})"))
    for metric, theirs in (champion or {}).items():
        if metric not in metrics:
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
