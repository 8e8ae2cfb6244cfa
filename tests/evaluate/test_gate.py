"""The gate's decision: thresholds, chance, and the champion, one reason line per check."""

from __future__ import annotations

from ffjobs.config.evaluate import GateConfig
from ffjobs.evaluate.gate import decide
from ffjobs.quality.significance import versus_chance

GOOD = {"identity_top1": 0.625, "identity_cosine": 0.41, "psnr": 19.4, "ssim": 0.61}
CHANCE = versus_chance(GOOD["identity_top1"], 40, 5)
"""Retrieval on 40 pairs of 5 held-out identities: chance 0.2, above it from 15 of 40."""


def test_default_gate_asks_for_retrieval_above_chance_and_some_ssim():
    assert CHANCE["floor"] == 0.375  # P(X >= 15 | n=40, p=0.2) < 0.01 <= P(X >= 14)
    passed = decide(GOOD, GateConfig(), vs_chance=CHANCE, champion=None)
    assert passed.passed and passed.failures == []
    assert passed.reasons == [
        "identity_top1 0.625 >= 0.375 (above chance 0.2: 40 pairs need 0.375 at the 0.01 level)",
        "ssim 0.610 >= 0.200 (evaluate.gate.min_ssim)",
    ]
    at_chance = {**GOOD, "identity_top1": 0.35, "ssim": 0.07}  # 14 of 40: luck can do that
    blocked = decide(at_chance, GateConfig(), vs_chance=CHANCE, champion=None)
    assert blocked.failures == [
        "identity_top1 0.350 < 0.375 (above chance 0.2: 40 pairs need 0.375 at the 0.01 level)",
        "ssim 0.070 < 0.200 (evaluate.gate.min_ssim)",
    ]


def test_the_margin_shrinks_as_the_set_grows_and_a_tiny_set_cannot_pass():
    floors = [versus_chance(0.0, pairs, 5)["floor"] for pairs in (40, 200, 1000)]
    assert floors[0] > floors[1] > floors[2] > 0.2
    tiny = versus_chance(1.0, 6, 2)  # even 6 of 6 happens by luck once in 64
    blocked = decide({**GOOD, "identity_top1": 1.0}, GateConfig(), vs_chance=tiny, champion=None)
    assert blocked.failures == [
        "identity_top1 1.000 < 1.167 (above chance 0.5: 6 pairs are too few to tell it from "
        "chance at the 0.01 level)"
    ]


def test_thresholds_name_their_setting():
    gate = GateConfig(min_identity_top1=0.7, min_psnr=19.0, min_ssim=0.7)
    decision = decide(GOOD, gate, vs_chance=CHANCE, champion=None)
    assert not decision.passed
    assert decision.failures == [
        "identity_top1 0.625 < 0.700 (evaluate.gate.min_identity_top1)",
        "ssim 0.610 < 0.700 (evaluate.gate.min_ssim)",
    ]
    assert "psnr 19.40 >= 19.00 (evaluate.gate.min_psnr)" in decision.reasons
    cosine = GateConfig(min_identity_cosine=0.5)
    assert decide(GOOD, cosine, vs_chance=CHANCE, champion=None).failures == [
        "identity_cosine 0.410 < 0.500 (evaluate.gate.min_identity_cosine)"
    ]


def test_champion_comparison_with_and_without_slack():
    champion = {**GOOD, "psnr": 19.5, "fid": 30.0}
    ours = {**GOOD, "fid": 31.0}
    blocked = decide(ours, GateConfig(), vs_chance=CHANCE, champion=champion)
    assert blocked.failures == [
        "psnr 19.40 < champion 19.50 - 0",
        "fid 31.00 > champion 30.00 + 0",
    ]
    assert "identity_top1 0.625 >= champion 0.625 - 0" in blocked.reasons  # equal is no regression
    slack = decide(ours, GateConfig(max_regression=1.0), vs_chance=CHANCE, champion=champion)
    assert slack.passed, slack.failures
    assert "fid 31.00 <= champion 30.00 + 1" in slack.reasons


def test_a_metric_only_one_side_has_is_not_compared():
    decision = decide(GOOD, GateConfig(), vs_chance=CHANCE, champion={**GOOD, "pose_error": 1.0})
    assert decision.passed and not any("pose_error" in r for r in decision.reasons)
    assert decision.to_dict()["passed"] is True
