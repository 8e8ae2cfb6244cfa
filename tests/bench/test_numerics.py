"""``ffjobs bench numerics``: its statistics against hand-computed values, and the command end to
end on a tiny model."""

from __future__ import annotations

import json
import math

import pytest
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

from ffjobs.bench.numerics import compare, finished_launches, paired_t, welch_t
from ffjobs.cli import main
from ffjobs.errors import UserError

# a handful of float operations on small exact inputs: agreement to 1e-12 leaves only rounding
EXACT = 1e-12


def test_welch_t_matches_the_hand_computed_value():
    # means 2 and 4, variances 1 and 4, three each: t = -2 / sqrt(1/3 + 4/3) = -2 sqrt(3/5)
    assert welch_t([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(-2 * math.sqrt(0.6), EXACT)
    assert welch_t([1.0, 1.0], [1.0, 1.0]) == 0.0  # the same constant: no difference at all
    assert welch_t([2.0, 2.0], [1.0, 1.0]) == math.inf  # apart with no spread


def test_paired_t_matches_the_hand_computed_value():
    # differences 0.5, 1, 1.5: mean 1, standard deviation 0.5, t = 1 / (0.5 / sqrt 3) = 2 sqrt 3
    result = paired_t([1.0, 2.0, 4.0], [0.5, 1.0, 2.5])
    assert result["mean"] == pytest.approx(1.0, EXACT)
    assert result["t"] == pytest.approx(2 * math.sqrt(3), EXACT)
    assert paired_t([3.0], [1.0]) == {"mean": 2.0}  # one pair: no spread to test against
    with pytest.raises(ValueError):
        paired_t([1.0, 2.0], [1.0])  # seeds that do not pair up are a bug, not a result


def test_compare_gives_the_distances_levels_and_tests_of_two_seeds():
    runs = {
        "preset 0": {"steps": [1, 2], "loss/a": [1.0, 3.0]},
        "eager 0": {"steps": [1, 2], "loss/a": [2.0, 2.0]},
        "eager 0 again": {"steps": [1, 2], "loss/a": [2.0, 2.5]},
        "preset 1": {"steps": [1, 2], "loss/a": [2.0, 4.0]},
        "eager 1": {"steps": [1, 2], "loss/a": [3.0, 5.0]},
    }
    c = compare(runs)["loss/a"]
    assert c["preset_to_eager_same_seed"] == pytest.approx(1.0, EXACT)  # (1 + 1) / 2 per seed
    assert c["noise"] == pytest.approx({"rounding": 0.25, "between_seeds": 2.0}, EXACT)
    assert c["levels"] == {"preset": [2.0, 3.0], "eager": [2.0, 4.0]}
    # means 2.5 and 3, variances 0.5 and 2: t = -0.5 / sqrt(0.25 + 1) = -1 / sqrt 5
    assert c["level_t"] == pytest.approx(-1 / math.sqrt(5), EXACT)
    # differences 0 and -1: mean -0.5, standard error 0.5
    assert c["paired"] == pytest.approx({"mean": -0.5, "t": -1.0}, EXACT)
    assert compare(runs, 1)["loss/a"].keys() == {
        "preset_to_eager_same_seed",
        "noise",
        "first_window",
    }


def test_an_out_file_of_other_settings_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "numerics.json"
    out.write_text(
        json.dumps({"config": "local", "steps": 5, "log_every": 0, "set": [], "runs": {}})
    )
    with pytest.raises(UserError, match="other settings.*another --out"):
        finished_launches(out, {"config": "local", "steps": 6, "log_every": 0, "set": []})
    out.write_text("{not json")
    with pytest.raises(UserError, match="not a report"):
        finished_launches(out, {"config": "local"})
    assert out.read_text() == "{not json"


@pytest.mark.slow  # five launches, each a rank process that imports torch: 5-40 s apiece on 2 cores
def test_the_command_compares_two_seeds_of_a_tiny_model(tmp_path, capsys):
    # "preset" with train.compile=false is eager: at the same seed both launches must train the
    # same weights on the same batches, bit for bit, while two seeds differ
    out = tmp_path / "numerics.json"
    settings = [*TINY_MODEL, "model.identity_weights=null", "train.compile=false"]
    argv = ["bench", "numerics", "--config", "local", "--steps", "4", "--log-every", "2", "--json"]
    for setting in settings:
        argv += ["--set", setting]
    assert main([*argv, "--seeds", "2", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["seeds"] == 2
    assert set(report["runs"]) == {"preset 0", "eager 0", "eager 0 again", "preset 1", "eager 1"}
    assert report["runs"]["preset 0"]["steps"] == [2, 4]
    assert {"loss/identity", "loss/reconstruction", "loss/d_real"} <= set(report["compared"])
    for c in report["compared"].values():
        assert c["preset_to_eager_same_seed"] == 0.0
        assert c["noise"]["between_seeds"] > 0
        assert c["paired"] == {"mean": 0.0, "t": 0.0}
    assert json.loads(out.read_text()) == report

    # a second call on the same file trains nothing: one seed is compared from what it holds
    assert main([*argv, "--seeds", "1", "--out", str(out)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["seeds"] == 1 and again["runs"] == report["runs"]
