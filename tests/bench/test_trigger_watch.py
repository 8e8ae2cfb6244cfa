"""``infra/bench/trigger_watch.py``: the figures it makes of the event loop's monitor samples."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "bench" / "trigger_watch.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("trigger_watch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_nearest_rank_percentiles_and_summary(bench):
    values = [float(v) for v in range(1, 101)]
    assert bench.percentile(values, 50) == 50.0
    assert bench.percentile(values, 99) == 99.0
    assert bench.percentile(values, 100) == 100.0
    assert bench.percentile([3.0], 99) == 3.0
    assert math.isnan(bench.percentile([], 50))
    assert bench.summary([2.0, 1.0, 3.0]) == {
        "n": 3, "min": 1.0, "median": 2.0, "p99": 3.0, "max": 3.0, "mean": 2.0}  # fmt: skip
    assert bench.summary([])["n"] == 0


def test_a_poll_is_charged_the_samples_whose_sleep_overlapped_it(bench):
    tick = 0.001
    # (woke, late, loop thread CPU): each slept from woke - late - tick
    samples = [
        (1.0011, 0.0001, 0.0001),  # slept 0.999-1.0011
        (1.0222, 0.0200, 0.0020),  # slept 1.0012-1.0222: 20 ms late, 2 ms of it on the CPU
        (2.0011, 0.0001, 0.0001),
        (3.0511, 0.0500, 0.0600),  # busy for longer than the lateness: counts the lateness
    ]
    windows = [(1.005, 1.010), (2.0, 2.0005), (2.5, 2.6), (3.0, 3.001)]
    assert bench.window_blocks(samples, windows, tick) == [
        (0.0200, 0.0020),  # a stall that began before the poll and ended after it
        (0.0001, 0.0001),
        (0.0, 0.0),  # no sample overlapped
        (0.0500, 0.0500),
    ]
    assert bench.busy((0.0, 0.0001, 0.0003)) == 0.0001
