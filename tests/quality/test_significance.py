"""Intervals and the chance floor, against hand-computed values and SciPy's own routines.

SciPy is an independent implementation of the same quantities (the binomial survival function
in C, the normal quantile), so agreement checks the arithmetic, not a copy of it. Tolerances:
a tail summed from at most a few hundred double-precision terms agrees to about n * 1e-16
relative, so 1e-9 leaves room and still catches any wrong term; hand-computed values are
written to 4 decimals, hence 5e-5.
"""

from __future__ import annotations

import math

import pytest
from scipy import stats

from ffjobs.quality.significance import (
    binomial_tail,
    chance_floor,
    chance_p_value,
    mean_interval,
    metric_intervals,
    versus_chance,
    wilson_interval,
)

SUMMED = 1e-9
FOUR_DECIMALS = 5e-5


@pytest.mark.parametrize(
    ("k", "n", "p"), [(5, 40, 0.2), (13, 40, 0.2), (1, 10, 0.5), (30, 200, 0.025)]
)
def test_the_binomial_tail_is_scipys(k, n, p):
    assert binomial_tail(k, n, p) == pytest.approx(stats.binom.sf(k - 1, n, p), rel=SUMMED)


def test_the_tail_at_its_edges():
    assert binomial_tail(0, 10, 0.3) == 1.0 and binomial_tail(11, 10, 0.3) == 0.0
    # by hand: P(X >= 2) for 2 fair coins is 1/4
    assert binomial_tail(2, 2, 0.5) == pytest.approx(0.25, rel=SUMMED)


@pytest.mark.parametrize(("n", "identities"), [(40, 5), (100, 5), (320, 40), (25, 5)])
def test_the_chance_floor_is_the_first_count_the_exact_test_rejects(n, identities):
    floor = chance_floor(n, identities, alpha=0.01)
    count = round(floor * n)
    chance = 1 / identities
    assert stats.binom.sf(count - 1, n, chance) <= 0.01 < stats.binom.sf(count - 2, n, chance)
    assert floor > chance


def test_the_demo_sets_floor_by_hand():
    # 40 pairs, 5 identities: P(X >= 15 | 0.2) = 0.0079 <= 0.01 < P(X >= 14) = 0.0194
    assert chance_floor(40, 5) == 15 / 40
    assert chance_p_value(0.15, 40, 5) > 0.5  # 6 of 40: what chance does most of the time


def test_too_few_pairs_can_never_beat_chance():
    assert chance_floor(2, 2, alpha=0.01) > 1.0
    with pytest.raises(ValueError, match="2 identities"):
        chance_floor(10, 1)


def test_the_wilson_interval_by_hand():
    # 8 of 10 at 95 %: centre (0.8 + z^2/20) / (1 + z^2/10), half-width from the same terms
    low, high = wilson_interval(0.8, 10)
    assert (low, high) == pytest.approx((0.4902, 0.9433), abs=FOUR_DECIMALS)
    # at 0 of n and n of n the interval touches its end (to rounding) and stays inside [0, 1]
    assert wilson_interval(0.0, 40)[0] == pytest.approx(0.0, abs=SUMMED)
    assert wilson_interval(1.0, 40)[1] == pytest.approx(1.0, abs=SUMMED)


def test_the_mean_interval_is_the_normal_one():
    values = [0.1, 0.4, 0.35, 0.8, 0.55, 0.2]
    mean, sem = sum(values) / 6, stats.sem(values)
    z = stats.norm.ppf(0.975)
    assert mean_interval(values) == pytest.approx((mean - z * sem, mean + z * sem), rel=SUMMED)
    assert mean_interval([0.3]) == (0.3, 0.3)
    assert math.isclose(sum(mean_interval(values)) / 2, mean, rel_tol=SUMMED)


def test_each_metric_gets_the_interval_of_its_kind():
    metrics = {"identity_top1": 0.8, "psnr": 15.0, "fid": 40.0}
    found = metric_intervals(metrics, {"psnr": [14.0, 16.0, 15.0]}, pairs=10)
    assert found["identity_top1"] == pytest.approx(list(wilson_interval(0.8, 10)), rel=SUMMED)
    assert found["psnr"] == pytest.approx(list(mean_interval([14.0, 16.0, 15.0])), rel=SUMMED)
    assert "fid" not in found  # measured on the whole set at once: no per-pair values


def test_retrieval_against_chance_says_whether_it_is_distinguishable():
    at_chance = versus_chance(0.15, 40, 5)
    assert at_chance["chance"] == 0.2 and at_chance["floor"] == 15 / 40
    assert not at_chance["distinguishable"] and at_chance["p_value"] > 0.5
    above = versus_chance(0.75, 40, 5)
    assert above["distinguishable"] and above["p_value"] < 1e-6
