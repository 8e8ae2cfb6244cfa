"""The shipper's outage handling with a delivery function that fails: one warning, a backoff
that doubles up to its cap with jitter, and one line when delivery resumes."""

from __future__ import annotations

import random
import time
import warnings

import pytest

from ffjobs.tracking import shipper as shipping
from ffjobs.tracking.shipper import BACKOFF_FIRST_S, BACKOFF_MAX_S, Shipper, TrackingWarning


def waits_after_failures(count: int) -> list[float]:
    """The waits a shipper schedules after ``count`` failed deliveries in a row."""
    ship = Shipper(lambda: (_ for _ in ()).throw(ConnectionError("refused")), "srv", "spool")
    waits = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(count):
            before = time.time()
            ship._attempt()
            waits.append(ship.retry_at - before)
    assert [w.category for w in caught] == [TrackingWarning]  # one warning per outage
    return waits


def test_the_backoff_doubles_to_its_cap_and_each_wait_is_jittered(monkeypatch):
    monkeypatch.setattr(shipping, "_JITTER", random.Random(1))
    waits = waits_after_failures(8)
    nominal = [min(BACKOFF_FIRST_S * 2**i, BACKOFF_MAX_S) for i in range(8)]
    for wait, cap in zip(waits, nominal, strict=True):
        # drawn in [cap / 2, cap]; time.time() moves between the two reads by microseconds
        assert cap / 2 - 0.01 <= wait <= cap + 0.01, (waits, nominal)
    assert max(waits) <= BACKOFF_MAX_S + 0.01
    # two runs losing the same server do not retry in lockstep
    monkeypatch.setattr(shipping, "_JITTER", random.Random(2))
    assert waits_after_failures(8) != pytest.approx(waits, abs=0.05)


def test_training_seeding_the_global_generator_does_not_fix_the_jitter(monkeypatch):
    random.seed(0)
    first = shipping._JITTER.random()
    random.seed(0)
    assert shipping._JITTER.random() != first


def test_delivery_resumed_says_one_line_and_resets_the_backoff(capsys):
    failing = {"on": True}

    def deliver() -> int:
        if failing["on"]:
            raise ConnectionError("refused")
        return 1

    ship = Shipper(deliver, "http://srv", "spool.jsonl")
    with pytest.warns(TrackingWarning, match="http://srv unreachable .*spool.jsonl"):
        ship._attempt()
    ship._attempt()
    failing["on"] = False
    ship._attempt()
    assert ship.outage_since is None and ship._backoff == BACKOFF_FIRST_S
    assert "delivery to http://srv resumed after" in capsys.readouterr().err
