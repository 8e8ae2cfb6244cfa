"""The gate's decision: thresholds, chance, and the champion, one reason line per check."""

from __future__ import annotations

from ffjobs.evaluate.gate import decide
from ffjobs.quality.config import GateConfig

GOOD = {"identity_top1": 0.625, "identity_cosine": 0.41, "psnr": 19.4, "ssim": 0.61}
UNCHANGED = {"identity_top1": 0.0, "identity_cosine": -0.012}
"""What returning the target unchanged scores."""


def test_default_gate_asks_for_retrieval_above_the_unchanged_target_and_some_ssim():
    passed = decide(GOOD, GateConfig(), unchanged=UNCHANGED, champion=None)
    assert passed.passed and passed.failures == []
    assert passed.reasons == [
        "identity_top1 0.625 > 0.000 (the target unchanged)",
        "ssim 0.610 >= 0.200 (evaluate.gate.min_ssim)",
    ]
    copied = {**GOOD, "identity_top1": 0.0, "ssim": 0.07}
    blocked = decide(copied, GateConfig(), unchanged=UNCHANGED, champion=None)
    assert blocked.failures == [
        "identity_top1 0.000 <= 0.000 (the target unchanged)",
        "ssim 0.070 < 0.200 (evaluate.gate.min_ssim)",
    ]


def test_thresholds_name_their_setting():
    gate = GateConfig(min_identity_top1=0.7, min_psnr=19.0, min_ssim=0.7)
    decision = decide(GOOD, gate, unchanged=UNCHANGED, champion=None)
    assert not decision.passed
    assert decision.failures == [
        "identity_top1 0.625 < 0.700 (evaluate.gate.min_identity_top1)",
        "ssim 0.610 < 0.700 (evaluate.gate.min_ssim)",
    ]
    assert "psnr 19.40 >= 19.00 (evaluate.gate.min_psnr)" in decision.reasons
    cosine = GateConfig(min_identity_cosine=0.5)
    assert decide(GOOD, cosine, unchanged=UNCHANGED, champion=None).failures == [
        "identity_cosine 0.410 < 0.500 (evaluate.gate.min_identity_cosine)"
    ]


def test_champion_comparison_with_and_without_slack():
    champion = {**GOOD, "psnr": 19.5, "fid": 30.0}
    ours = {**GOOD, "fid": 31.0}
    blocked = decide(ours, GateConfig(), unchanged=UNCHANGED, champion=champion)
    assert blocked.failures == [
        "psnr 19.40 < champion 19.50 - 0",
        "fid 31.00 > champion 30.00 + 0",
    ]
    assert "identity_top1 0.625 >= champion 0.625 - 0" in blocked.reasons  # equal is no regression
    slack = decide(ours, GateConfig(max_regression=1.0), unchanged=UNCHANGED, champion=champion)
    assert slack.passed, slack.failures
    assert "fid 31.00 <= champion 30.00 + 1" in slack.reasons


def test_a_metric_only_one_side_has_is_not_compared():
    decision = decide(GOOD, GateConfig(), unchanged=UNCHANGED, champion={**GOOD, "pose_error": 1.0})
    assert decision.passed and not any("pose_error" in r for r in decision.reasons)
    assert decision.to_dict()["passed"] is True
