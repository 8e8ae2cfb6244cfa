"""Acceptance against a real MLflow server and real CPU training on two local ranks: a tracking
outage in the middle of training loses and duplicates nothing and warns once; a failed attempt
retried from its checkpoint leaves one MLflow run with both attempts, goodput below 1 and every
metric step exactly once."""

from __future__ import annotations

import threading
import time

import pytest
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

from ffjobs.config import load_config
from ffjobs.runs.run import create_run, finish_run, resume_run
from ffjobs.runs.stages import run_stage
from ffjobs.tracking.shipper import BACKOFF_MAX_S
from ffjobs.tracking.spool import logged_steps

mlflow = pytest.importorskip("mlflow")


def _config(tmp_path, uri: str, *overrides: str):
    """The tiny CPU model with a random frozen identity encoder (what is tracked, not what is
    learnt, matters here: no pre-training), every step logged, tracking into ``uri``."""
    return load_config(
        "local",
        [
            *TINY_MODEL,
            "model.identity_weights=null",
            "train.batch_size=2",
            "train.log_every=1",
            "train.precision=fp32",
            "train.progress=false",
            f"train.checkpoint_dir={tmp_path / 'ckpt'}",
            f"runs_dir={tmp_path / 'runs'}",
            f"tracking.tracking_uri={uri}",
            "tracking.system_metrics_interval_s=0",
            *overrides,
        ],
    )


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


PAUSE_AT_STEP = 12
"""Training waits as this step starts until the test has seen delivery resume."""
SERVER_WAIT_S = BACKOFF_MAX_S + 90
"""Longest wait, once the server is back, for it to hold the steps before the pause: the
shipper's next attempt comes within its longest backoff, then one delivery of a few dozen
records; the rest is room for a slow machine (a deadline, not a measurement)."""


@pytest.mark.slow  # two server starts around a launch of two ranks
def test_an_outage_during_training_loses_nothing_and_warns_once(
    tmp_path, monkeypatch, record_property
):
    """The server is down from before the first step and started again while training runs;
    training waits at :data:`PAUSE_AT_STEP` (a drill pause, so no race between the number of
    steps and how fast a server starts) until the real server holds every step logged before
    it, i.e. the ranks' shipper resumed delivery during training, then trains to the end."""
    from mlflow_server import MlflowServer

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once while down
    server = MlflowServer(tmp_path / "mlflow").start()
    go_on = tmp_path / "go-on"
    try:
        config = _config(
            tmp_path,
            server.uri,
            "train.steps=24",
            "train.checkpoint_every=8",
            f"train.faults.pause_at_step={PAUSE_AT_STEP}",
            f"train.faults.pause_until_file={go_on}",
        )
        run = create_run(config, key="outage")
        server.stop()  # down from before the first step
        seen: dict[str, object] = {}
        training_over = threading.Event()  # a training that failed early: stop watching

        def bring_back_and_watch() -> None:
            try:
                # back only once rank 0's shipper has met the outage (its one warning): on a
                # busy machine its first attempt, which imports MLflow, can come after a server
                # started on a count of spooled steps is up already, and then meets no outage
                rank0_log = run.dir / "train" / "logs" / "rank-00000.log"
                deadline = time.monotonic() + SERVER_WAIT_S
                while not (
                    logged_steps(run.tracking_dir).get("lr", 0) >= 3
                    and rank0_log.exists()
                    and "TrackingWarning" in rank0_log.read_text(errors="replace")
                ):
                    if training_over.wait(0.05) or time.monotonic() > deadline:
                        return
                server.start()
                seen["back_at"] = time.monotonic()
                client = mlflow.MlflowClient(server.uri)
                deadline = time.monotonic() + SERVER_WAIT_S
                while time.monotonic() < deadline and not training_over.is_set():
                    steps = [step for step, _ in _history(client, run.mlflow_run_id, "lr")]
                    if steps and "first_delivered_at" not in seen:
                        seen["first_delivered_at"] = time.monotonic()
                    if steps and steps[-1] == PAUSE_AT_STEP - 1:
                        seen["before_release"] = steps
                        return
                    time.sleep(0.1)
            except Exception as exc:  # the main thread asserts on it
                seen["error"] = exc
            finally:
                go_on.touch()  # training goes on whatever happened here

        watcher = threading.Thread(target=bring_back_and_watch, daemon=True)
        watcher.start()
        outcome = run_stage(config, run, "train", data="memory")
        training_over.set()
        watcher.join(SERVER_WAIT_S)
        finish_run(run, "FINISHED")
        assert outcome.status == "passed", outcome.summary
        assert "error" not in seen, seen.get("error")

        # while rank 0 was held at the pause, the real server already had steps 1..11: the
        # shipper resumed by itself during training, not the owner's delivery at the end
        assert seen.get("before_release") == list(range(1, PAUSE_AT_STEP)), seen
        record_property("resume_latency_s", round(seen["first_delivered_at"] - seen["back_at"], 1))

        client = mlflow.MlflowClient(server.uri)
        steps = [step for step, _ in _history(client, run.mlflow_run_id, "lr")]
        assert steps == list(range(1, 25))  # every step, in order, once
        assert len(_history(client, run.mlflow_run_id, "loss_identity")) == 24
        assert client.get_run(run.mlflow_run_id).info.status == "FINISHED"
        rank0 = (run.dir / "train" / "logs" / "rank-00000.log").read_text()
        assert rank0.count("TrackingWarning") == 1, rank0  # one warning, not one per step
        assert rank0.count("unreachable") == 1
        assert rank0.count("resumed after") == 1, rank0  # one line when delivery resumed
    finally:
        go_on.touch()
        server.stop()


@pytest.mark.slow  # a launch of two ranks and a server start
def test_a_server_down_when_the_run_starts_gets_the_whole_run_when_it_is_back(
    tmp_path, monkeypatch
):
    """No MLflow run can be created at the start: the run spools everything it logs (tags,
    params, every step), and the owner creates the MLflow run and delivers it all at its end."""
    from mlflow_server import MlflowServer

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = MlflowServer(tmp_path / "mlflow")  # not started yet
    try:
        config = _config(tmp_path, server.uri, "train.steps=6", "train.checkpoint_every=6")
        with pytest.warns(UserWarning, match="spooled in its run directory"):
            run = create_run(config, key="late")
        assert run.mlflow_run_id is None
        outcome = run_stage(config, run, "train", data="memory")
        assert outcome.status == "passed", outcome.summary
        server.start()
        finish_run(run, "FINISHED")

        client = mlflow.MlflowClient(server.uri)
        stored = client.get_run(run.mlflow_run_id)
        assert stored.info.status == "FINISHED"
        assert stored.data.tags["ffjobs.run_key"] == "late"
        assert stored.data.params["train.steps"] == "6"
        assert [step for step, _ in _history(client, run.mlflow_run_id, "lr")] == list(range(1, 7))
    finally:
        server.stop()


@pytest.mark.slow  # two launches of two ranks: about 40 s on a busy 2-core machine
def test_a_retried_attempt_is_one_run_with_both_attempts_and_no_step_twice(tmp_path, mlflow_server):
    config = _config(
        tmp_path,
        mlflow_server.uri,
        "train.steps=8",
        "train.checkpoint_every=4",
        "train.faults.raise_rank=0",
        "train.faults.raise_at_step=7",  # after steps 5 and 6 were logged, past checkpoint 4
    )
    run = create_run(config, key="retried")
    first = run_stage(config, run, "train", data="memory")
    finish_run(run, "FAILED")
    assert first.status == "failed"

    run = resume_run("retried", config)
    second = run_stage(config, run, "train", data="memory")
    finish_run(run, "FINISHED")
    assert second.status == "passed", second.summary

    client = mlflow.MlflowClient(mlflow_server.uri)
    found = client.search_runs(
        [client.get_run(run.mlflow_run_id).info.experiment_id],
        filter_string="tags.`ffjobs.run_key` = 'retried'",
    )
    assert [r.info.run_id for r in found] == [run.mlflow_run_id]  # one MLflow run
    history = _history(client, run.mlflow_run_id, "loss_identity")
    assert [step for step, _ in history] == list(range(1, 9))  # none lost, none twice
    tags = client.get_run(run.mlflow_run_id).data.tags
    assert "rank 0 ended with exit status 1" in tags["ffjobs.attempt.1"]
    assert "succeeded (steps 4 -> 8)" in tags["ffjobs.attempt.2"]
    lost = _history(client, run.mlflow_run_id, "attempt_steps_lost")
    assert lost == [(1, 2.0), (2, 0.0)]  # steps 5 and 6 were redone
    goodput = _history(client, run.mlflow_run_id, "goodput")
    assert [step for step, _ in goodput] == [1, 2] and 0 < goodput[-1][1] < 1
