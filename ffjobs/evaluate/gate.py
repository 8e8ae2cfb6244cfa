"""The gate before review: thresholds from ``evaluate.gate`` and no regression against the
registry's champion, evaluated now on the same set with the same encoder.

:func:`decide` is pure: metrics in, ``{"passed": bool, "reasons": [one line per check]}`` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ffjobs.config.evaluate import GateConfig
from ffjobs.quality.metrics import BETTER_WHEN_HIGHER
from ffjobs.quality.significance import margin


@dataclass
class GateDecision:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    """One line per check, e.g. ``identity_top1 0.625 >= 0.375 (above chance 0.2: 40 pairs
    need 0.375 at the 0.01 level)`` or ``psnr 18.10 < champion 19.40 - 0``."""
    failures: list[str] = field(default_factory=list)
    """The reasons of the checks that failed."""

    def to_dict(self) -> dict:
        return asdict(self)


def thresholds(gate: GateConfig, vs_chance: Mapping[str, Any]) -> dict[str, tuple[float, str]]:
    """``metric -> (bound, where it comes from)``; each is met by reaching it. Retrieval left
    unset must reach the floor of :func:`ffjobs.quality.significance.versus_chance`: chance
    (1 / held-out identities) plus the margin the set's number of pairs needs for retrieval
    to be above chance at its level."""
    found = {}
    if gate.min_identity_top1 is None:
        found["identity_top1"] = (
            vs_chance["floor"],
            f"above chance {vs_chance['chance']:.3g}: {margin(vs_chance)}",
        )
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
    vs_chance: Mapping[str, Any],
    champion: Mapping[str, float] | None,
) -> GateDecision:
    """Check ``metrics`` against the thresholds (``vs_chance``: retrieval against chance on
    this set, see :func:`thresholds`) and the champion's metrics."""
    checks: list[tuple[bool, str]] = []
    for metric, (minimum, source) in thresholds(gate, vs_chance).items():
        value = metrics[metric]
        ok = value >= minimum
        checks.append(
            (ok, f"{metric} {_num(value)} {'>=' if ok else '<'} {_num(minimum)} ({source})")
        )
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
