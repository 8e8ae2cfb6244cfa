"""How sure an evaluation is: confidence intervals, and whether retrieval is above chance.

Pure functions over counts and per-pair values, standard library only (they also run where
only torch is installed).

Identity retrieval (``identity_top1``) over ``n`` pairs and ``k`` held-out identities is read as
``n`` trials of a coin whose chance rate is ``1 / k``: a model that moved no identity retrieves
the right one by luck at that rate. :func:`chance_floor` is the smallest rate that an exact
one-sided binomial test calls above chance at level ``alpha``; below it the result is "not
distinguishable from chance". The pairs of one set share identities and images, so the trials
are not quite independent and the test is a little optimistic; the floor is a minimum to clear,
not a proof of quality.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

LEVEL = 0.95
"""Confidence level of the intervals an evaluation reports."""


def binomial_tail(successes: int, n: int, p: float) -> float:
    """``P(X >= successes)`` for ``X ~ Binomial(n, p)``, summed exactly in log space."""
    if successes <= 0:
        return 1.0
    if successes > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * log_p
        + (n - i) * log_q
        for i in range(successes, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def chance_floor(n: int, identities: int, alpha: float = 0.01) -> float:
    """The smallest retrieval rate over ``n`` pairs that is above the chance rate
    ``1 / identities`` at level ``alpha`` (one-sided exact binomial test): ``c / n`` for the
    smallest count ``c`` with ``P(X >= c) <= alpha`` under chance. ``1.0`` plus one pair's share
    when no count is enough (too few pairs to tell anything from chance)."""
    if n < 1 or identities < 2:
        raise ValueError(f"need at least 1 pair and 2 identities, got {n} and {identities}")
    chance = 1.0 / identities
    for count in range(math.ceil(chance * n), n + 1):
        if binomial_tail(count, n, chance) <= alpha:
            return count / n
    return 1.0 + 1.0 / n


def chance_p_value(rate: float, n: int, identities: int) -> float:
    """How likely chance alone retrieves at least ``rate`` over ``n`` pairs."""
    return binomial_tail(round(rate * n), n, 1.0 / identities)


def wilson_interval(rate: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion observed as ``rate`` over ``n`` trials (it stays
    inside ``[0, 1]`` and keeps its coverage near 0 and 1, where the normal interval does not)."""
    if n < 1:
        raise ValueError(f"an interval needs at least one trial, got n={n}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    denominator = 1 + z * z / n
    centre = (rate + z * z / (2 * n)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / denominator
    # at 0 of n (n of n) the low (high) end is exactly 0 (1); the formula gets it to rounding
    low = 0.0 if rate <= 0.0 else max(0.0, centre - half)
    high = 1.0 if rate >= 1.0 else min(1.0, centre + half)
    return low, high


def mean_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Normal interval of the mean of per-pair ``values`` (cosines, PSNR, SSIM): mean ±
    z * standard error. An evaluation has tens of pairs or more, where the mean is close to
    normal; with one value the interval is the value itself."""
    n = len(values)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, mean
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = NormalDist().inv_cdf(0.5 + level / 2) * math.sqrt(variance / n)
    return mean - half, mean + half


ALPHA = 0.01
"""The level of the test against chance an evaluation reports (one-sided, exact)."""


def metric_intervals(
    metrics: Mapping[str, float], per_pair: Mapping[str, Sequence[float]], pairs: int
) -> dict[str, list[float]]:
    """``metric -> [low, high]`` at :data:`LEVEL`: a Wilson interval for ``identity_top1`` (a
    rate over ``pairs``), a normal one for each metric with per-pair values (a mean); none for
    a metric measured on the whole set at once (FID)."""
    found = {}
    if "identity_top1" in metrics and pairs > 0:
        found["identity_top1"] = list(wilson_interval(metrics["identity_top1"], pairs))
    for metric, values in per_pair.items():
        if metric in metrics and values:
            found[metric] = list(mean_interval(values))
    return found


def versus_chance(rate: float, pairs: int, identities: int, alpha: float = ALPHA) -> dict:
    """Identity retrieval against chance: the chance rate, the floor a one-sided exact test at
    ``alpha`` needs, the p-value of ``rate``, and whether it is distinguishable from chance."""
    floor = chance_floor(pairs, identities, alpha)
    return {
        "pairs": pairs,
        "chance": 1.0 / identities,
        "alpha": alpha,
        "floor": floor,
        "p_value": chance_p_value(rate, pairs, identities),
        "distinguishable": rate >= floor,
    }


UNITS = {"psnr": " dB"}


def describe_metrics(
    metrics: Mapping[str, float],
    intervals: Mapping[str, Sequence[float]],
    vs_chance: Mapping[str, Any] | None,
) -> str:
    """One line of what was measured, each metric with its interval at :data:`LEVEL`, and
    identity retrieval against chance (:func:`versus_chance`): the evaluate stage's summary,
    the training probe's progress line and the demo's last lines all say it this way."""
    parts = []
    for name, value in metrics.items():
        text = f"{name} {value:.3g}{UNITS.get(name, '')}"
        if name in intervals:
            low, high = intervals[name]
            text += f" [{low:.3g}, {high:.3g}]"
        if name == "identity_top1" and vs_chance:
            verdict = (
                "above chance"
                if vs_chance["distinguishable"]
                else "not distinguishable from chance"
            )
            text += f" ({verdict} {vs_chance['chance']:.3g}: {margin(vs_chance)})"
        parts.append(text)
    return ", ".join(parts)


def margin(vs_chance: Mapping[str, Any]) -> str:
    """What the set's size asks of retrieval: ``40 pairs need 0.375 at the 0.01 level``, or
    that no rate is enough on so few pairs."""
    pairs, alpha = vs_chance["pairs"], vs_chance["alpha"]
    if vs_chance["floor"] > 1:
        return f"{pairs} pairs are too few to tell it from chance at the {alpha:g} level"
    return f"{pairs} pairs need {vs_chance['floor']:.3g} at the {alpha:g} level"
