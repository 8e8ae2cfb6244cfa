"""``ffjobs bench quality``: the held-out measurement of a preset's model as it trains, the
untrained generator at step 0, a seed at a time, in a folder of its own."""

from __future__ import annotations

import json

from train.helpers import place_local_encoders

from ffjobs.cli import main

SMALL_GENERATOR = [  # the identity encoders stay the preset's: the shared ones fit
    "model.width=8",
    "model.max_width=16",
    "model.residual_blocks=1",
    "model.discriminator_width=8",
    "model.discriminator_layers=2",
]


def test_bench_quality_measures_before_and_while_training(tmp_path, capsys):
    place_local_encoders(tmp_path)  # the embedded default's encoders, made once per test run
    capsys.readouterr()  # their making, when this test is the first to need them, is not the bench's
    sets = [arg for item in SMALL_GENERATOR for arg in ("--set", item)]
    out = tmp_path / "quality.json"
    code = main(
        ["bench", "quality", "--steps", "4", "--every", "2", "--seeds", "0", "--batch", "4",
         "--workdir", str(tmp_path), "--out", str(out), "--json", *sets]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    report = json.loads(captured.out)  # stdout is the report alone
    points = report["seeds"]["0"]["points"]
    assert list(points) == ["0", "2", "4"]  # the untrained generator, then every 2 steps
    for measured in points.values():
        assert set(measured) == {"identity_top1", "identity_cosine", "psnr", "ssim"}
    assert json.loads(out.read_text()) == report
    assert "pre-training" not in captured.err  # the shared encoders were made from this data
    assert "held-out at step 0: identity_top1 " in captured.err
    assert "seed 0 (" in captured.err and "identity_top1 " in captured.err


def test_bench_quality_refuses_a_bad_setting_before_training(tmp_path, capsys):
    code = main(["bench", "quality", "--steps", "0", "--workdir", str(tmp_path / "bench")])
    assert code == 2
    assert "--steps, --every and --batch must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()
