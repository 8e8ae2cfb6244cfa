"""The tracking spool: records in order, a watermark that moves only past delivered batches, a
replay that adds nothing twice (against a real MLflow store), a torn last line ignored."""

from __future__ import annotations

import pytest

from ffjobs.tracking.delivery import deliver
from ffjobs.tracking.spool import Spool, logged_steps, run_spools


def _metric(step: int, value: float, key: str = "loss") -> dict:
    return {
        "kind": "metrics",
        "step": step,
        "timestamp": 1_700_000_000_000 + step,
        "values": {key: value},
    }


def test_records_come_back_in_order_with_their_step_and_timestamp(tmp_path):
    spool = Spool.for_writer(tmp_path, "w")
    seqs = [spool.append(_metric(step, step / 10)) for step in range(1, 6)]
    assert seqs == [1, 2, 3, 4, 5]
    records = spool.records()
    assert [seq for seq, _ in records] == seqs
    assert [r["step"] for _, r in records] == [1, 2, 3, 4, 5]
    assert records[2][1]["timestamp"] == 1_700_000_000_003
    assert run_spools(tmp_path)[0].path == spool.path


def test_watermark_leaves_only_what_was_not_delivered(tmp_path):
    spool = Spool.for_writer(tmp_path, "w")
    for step in range(1, 5):
        spool.append(_metric(step, 1.0))
    assert spool.delivered == 0 and len(spool.pending()) == 4
    spool.mark_delivered(2)
    assert [r["step"] for _, r in spool.pending()] == [3, 4]
    assert Spool(spool.path).delivered == 2  # another process reads the same watermark


def test_torn_last_line_is_ignored_and_the_rest_is_kept(tmp_path):
    spool = Spool.for_writer(tmp_path, "w")
    spool.append(_metric(1, 1.0))
    spool.append(_metric(2, 2.0))
    with spool.path.open("a") as out:
        out.write('{"seq":3,"kind":"metrics","step":3,"timest')  # the writer died mid-write
    assert [r["step"] for _, r in spool.pending()] == [1, 2]
    assert logged_steps(tmp_path) == {"loss": 2}


def test_a_writer_appending_to_an_existing_spool_continues_its_numbering(tmp_path):
    Spool.for_writer(tmp_path, "w").append(_metric(1, 1.0))
    assert Spool.for_writer(tmp_path, "w").append(_metric(2, 1.0)) == 2


def test_logged_steps_is_the_highest_step_per_metric_across_writers(tmp_path):
    first, second = Spool.for_writer(tmp_path, "a"), Spool.for_writer(tmp_path, "b")
    first.append(_metric(4, 1.0))
    first.append(_metric(6, 1.0, key="lr"))
    second.append(_metric(2, 1.0))
    assert logged_steps(tmp_path) == {"loss": 4, "lr": 6}


def test_replay_after_a_crash_mid_delivery_creates_no_second_points(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("t", artifact_location=str(tmp_path / "artifacts"))
    run_id = client.create_run(experiment).info.run_id
    spool = Spool.for_writer(tmp_path / "tracking", "w")
    for step in range(1, 8):
        spool.append(_metric(step, step * 0.5))
    spool.append({"kind": "params", "params": {"train.lr": "0.1"}})
    spool.append({"kind": "tags", "tags": {"ffjobs.train": "passed"}})

    assert deliver(client, run_id, spool, batch=3) == (9, 0)
    assert spool.delivered == 9
    # a crash after the server took batches 2 and 3 but before the watermark moved past them
    spool.mark_delivered(3)
    assert deliver(client, run_id, spool, batch=3) == (6, 0)

    history = client.get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(s, s * 0.5) for s in range(1, 8)]
    run = client.get_run(run_id)
    assert run.data.params == {"train.lr": "0.1"} and run.data.tags["ffjobs.train"] == "passed"
    assert deliver(client, run_id, spool) == (0, 0)  # nothing pending: nothing sent


def test_a_spool_another_process_is_delivering_is_left_alone(tmp_path):
    spool = Spool.for_writer(tmp_path, "w")
    spool.append(_metric(1, 1.0))
    with spool.delivering() as held:
        assert held
        # the lock is per open file description: a second open in this process stands in for
        # another process (flock semantics)
        with Spool(spool.path).delivering(wait=False) as second:
            assert second is False
