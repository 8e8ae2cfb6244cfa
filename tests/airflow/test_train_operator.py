"""The deferring training operator against a fake SLURM at the subprocess boundary
(:mod:`fake_slurm`): ``execute`` submits and defers, re-attaches instead of submitting, the
completion method handles every kind of end (success, a retryable failure that is submitted
again with its backoff as a start time, a fatal one, a job accounting lost, a spent budget), and
an Airflow retry continues the run's budget. The real cluster and the real Airflow run the same
paths in tests/integration/test_airflow_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from fake_slurm import FakeSlurm
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

from ffjobs.airflow.operators import STORE_KEY, TrainOperator
from ffjobs.config import load_config
from ffjobs.runs.run import create_run

DATA = Path(__file__).resolve().parents[1] / "slurm" / "data"


class Store:
    """The task state store: kept across tries, as Airflow keeps it."""

    def __init__(self):
        self.values: dict[str, Any] = {}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, retention=None):
        self.values[key] = json.loads(json.dumps(value))  # stored as JSON

    def delete(self, key):
        self.values.pop(key, None)


class TaskInstance:
    def __init__(self, try_number: int = 1):
        self.try_number, self.max_tries, self.xcom = try_number, 1, {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "fake-slurm")
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    return fake


@pytest.fixture
def run(tmp_path, cluster):
    config = load_config(
        "clusters/minicluster",
        [*TINY_MODEL, "model.identity_weights=null", "data.synth.identities=6",
         "data.synth.per_identity=2", "tracking.enabled=false", "slurm.max_attempts=2",
         "evaluate.every_steps=0",  # no job runs: no evaluation encoder to pre-train for it
         "slurm.retry_backoff_s=30", f"slurm.folder={tmp_path / 'jobs'}"],
    )  # fmt: skip
    return create_run(config, echo=lambda line: None)


def context(store: Store, try_number: int = 1) -> dict[str, Any]:
    return {"ti": TaskInstance(try_number), "task_state_store": store}


def operator(run) -> TrainOperator:
    return TrainOperator(task_id="train", state={"run_dir": str(run.dir)}, poll_s=1)


def deferred(call) -> dict[str, Any]:
    """The trigger kwargs of the ``TaskDeferred`` that ``call()`` raises."""
    with pytest.raises(TaskDeferred) as raised:
        call()
    assert raised.value.method_name == "execute_complete"
    return raised.value.trigger.serialize()[1]


def event(kwargs: dict[str, Any], cluster: FakeSlurm) -> dict[str, Any]:
    """The trigger's event for the job ``kwargs`` watch, as the fake cluster says it ended."""
    from ffjobs.airflow.triggers import status_payload
    from ffjobs.slurm.jobstate import poll_jobs

    status = poll_jobs([kwargs["job_id"]])[kwargs["job_id"]]
    return {**{k: kwargs[k] for k in ("job_id", "attempt", "submitted_at", "token")},
            "status": status_payload(status), "unconfirmed": []}  # fmt: skip


def rank_logs(kwargs: dict[str, Any], *texts: str) -> None:
    folder = Path(kwargs["folder"])
    for task, text in enumerate(texts):
        (folder / f"{kwargs['job_id']}_{task}_log.err").write_text(text)


def gloo_failure(kwargs):
    rank_logs(kwargs, (DATA / "gloo-read-error-rank0.log").read_text(),
              "[fault] rank 1: SIGKILL at step 20\n")  # fmt: skip


def test_execute_submits_once_keeps_the_job_and_defers(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    assert (kwargs["job_id"], kwargs["attempt"]) == ("100", 1)
    assert len(cluster.calls("sbatch")) == 1
    assert cluster.jobs()["100"]["name"] == run.key  # found by name if its id were lost
    assert store.get(STORE_KEY)["job_id"] == "100"
    record = json.loads((run.dir / "run.json").read_text())
    assert record["slurm_jobs"] == [{"attempt": 1, "job_id": "100"}]


def test_a_retry_re_attaches_to_the_live_job_instead_of_submitting(run, cluster):
    store = Store()
    first = deferred(lambda: operator(run).execute(context(store)))
    again = deferred(lambda: operator(run).execute(context(store, try_number=2)))
    assert again["job_id"] == "100" and len(cluster.calls("sbatch")) == 1
    # the job is the new try's now: a late kill of the first try's trigger cancels nothing
    assert again["token"] != first["token"] and again["token"].startswith("2:")


def test_a_job_whose_id_was_never_recorded_is_found_by_the_runs_name(run, cluster):
    """The worker died right after sbatch: neither the store nor run.json has the id."""
    deferred(lambda: operator(run).execute(context(Store())))
    record = json.loads((run.dir / "run.json").read_text())
    record["slurm_jobs"] = []
    (run.dir / "run.json").write_text(json.dumps(record))
    again = deferred(lambda: operator(run).execute(context(Store(), try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("100", 1)
    assert len(cluster.calls("sbatch")) == 1


def killed_right_after_sbatch(run, cluster, job_id: str, *, task_left: bool = True) -> None:
    """Leave ``job_id`` as a submitter killed the moment sbatch answered leaves it
    (:meth:`FakeSlurm.killed_right_after_sbatch`), nothing recorded anywhere."""
    from ffjobs.slurm.executor import job_folder

    folder = job_folder(run.config.slurm.folder, run.key, 1)
    cluster.killed_right_after_sbatch(job_id, folder, task_left=task_left)
    record = json.loads((run.dir / "run.json").read_text())
    record["slurm_jobs"] = []
    (run.dir / "run.json").write_text(json.dumps(record))


def test_a_job_left_held_by_a_killed_submitter_is_finished_and_released(run, cluster):
    """Jobs are submitted held and released once submitit has moved their task into place: a
    job whose submitter died in between runs after all, as the same job."""
    deferred(lambda: operator(run).execute(context(Store())))
    assert ["scontrol", "release", "100"] in cluster.calls("scontrol")
    killed_right_after_sbatch(run, cluster, "100")
    again = deferred(lambda: operator(run).execute(context(Store(), try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("100", 1)
    assert len(cluster.calls("sbatch")) == 1 and not cluster.jobs()["100"]["held"]
    pickles = sorted(p.name for p in Path(again["folder"]).parent.rglob("*.pkl"))
    assert pickles == ["100_submitted.pkl"]  # where the job's first line looks for its task


def test_a_job_left_held_without_its_task_is_cancelled_and_submitted_again(run, cluster):
    deferred(lambda: operator(run).execute(context(Store())))
    killed_right_after_sbatch(run, cluster, "100", task_left=False)
    again = deferred(lambda: operator(run).execute(context(Store(), try_number=2)))
    assert cluster.jobs()["100"]["state"].startswith("CANCELLED")
    assert again["job_id"] == "101" and len(cluster.calls("sbatch")) == 2


def test_a_successful_job_ends_the_task_with_its_facts(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    cluster.end("100", "COMPLETED")
    xcom = operator(run).execute_complete(context(store), event(kwargs, cluster))
    assert xcom["run_key"] == run.key
    attempts = [json.loads(line) for line in (run.dir / "train" / "attempts.jsonl").open()]
    assert [(a["number"], a["job_id"], a["kind"]) for a in attempts] == [(1, "100", None)]
    assert len(cluster.calls("sbatch")) == 1
    record = json.loads((run.dir / "run.json").read_text())
    (train,) = [s for s in record["stages"] if s["name"] == "train"]
    assert train["status"] == "passed" and train["facts"]["job_ids"] == ["100"]


def test_a_job_that_ended_unwatched_is_read_by_the_next_try_without_deferring(run, cluster):
    """The try that deferred failed before its trigger's event was read (Airflow 3.3's
    scheduler race after a trigger that fires within seconds): the retry reads the ended job
    itself and ends as the trigger's path would, deferring to nothing."""
    store = Store()
    deferred(lambda: operator(run).execute(context(store)))
    cluster.end("100", "COMPLETED")
    xcom = operator(run).execute(context(store, try_number=2))  # no TaskDeferred
    assert xcom["run_key"] == run.key
    assert [(a["number"], a["job_id"], a["kind"]) for a in attempts(run)] == [(1, "100", None)]
    assert len(cluster.calls("sbatch")) == 1


def test_a_failure_that_ended_unwatched_goes_on_with_its_backoff(run, cluster):
    """Read by the next try, a retryable failure is decided as the trigger's path decides it:
    the next attempt without the suspect, its backoff a start time, and that one is watched."""
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    gloo_failure(kwargs)
    cluster.end("100", "FAILED", exit_code=1)
    again = deferred(lambda: operator(run).execute(context(store, try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("101", 2)
    job = cluster.jobs()["101"]
    assert (job["exclude"], job["begin"]) == ("node2", "now+30")


def test_a_retryable_failure_is_submitted_again_without_its_suspect_after_its_backoff(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    gloo_failure(kwargs)
    cluster.end("100", "FAILED", exit_code=1)
    again = deferred(lambda: operator(run).execute_complete(context(store), event(kwargs, cluster)))
    assert (again["job_id"], again["attempt"]) == ("101", 2)
    job = cluster.jobs()["101"]
    assert job["exclude"] == "node2"  # the killed rank's node
    assert job["begin"] == "now+30"  # the backoff waits in SLURM's queue, not in a worker
    assert store.get(STORE_KEY)["job_id"] == "101"


def test_a_fatal_failure_fails_the_task_for_good_with_its_reason(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    rank_logs(kwargs, (DATA / "value-error-rank0.log").read_text(),
              (DATA / "value-error-peer-rank1.log").read_text())  # fmt: skip
    cluster.end("100", "FAILED", exit_code=1)
    with pytest.raises(AirflowFailException, match="not retryable: ValueError"):
        operator(run).execute_complete(context(store), event(kwargs, cluster))
    assert len(cluster.calls("sbatch")) == 1


def test_a_job_accounting_never_heard_of_is_asked_of_every_source(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    cluster.end("100", "COMPLETED")
    cluster.forget("100")  # sacct has no record; scontrol still knows the job
    lost = {**event(kwargs, cluster), "status": None}
    xcom = operator(run).execute_complete(context(store), lost)
    assert xcom["run_key"] == run.key


def test_the_budget_is_the_runs_across_airflow_tries(run, cluster):
    """slurm.max_attempts=2: two failed jobs spend it; the task fails for good, and a further
    Airflow try submits nothing."""
    store = Store()
    first = deferred(lambda: operator(run).execute(context(store)))
    gloo_failure(first)
    cluster.end("100", "FAILED", exit_code=1)
    second = deferred(lambda: operator(run).execute_complete(context(store), event(first, cluster)))
    gloo_failure(second)
    cluster.end("101", "FAILED", exit_code=1)
    with pytest.raises(AirflowFailException, match="attempt budget of 2 spent"):
        operator(run).execute_complete(context(store), event(second, cluster))
    with pytest.raises(AirflowFailException, match="attempt budget of 2 spent"):
        operator(run).execute(context(store, try_number=2))
    assert len(cluster.calls("sbatch")) == 2


def attempts(run) -> list[dict[str, Any]]:
    log = run.dir / "train" / "attempts.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_job_someone_cancels_while_it_is_watched_fails_the_task_and_is_not_retried(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    cluster.end("100", "CANCELLED by 0", exit_code=0)  # scancel by root
    with pytest.raises(AirflowFailException, match=r"cancelled by user root \(uid 0\) through "
                       r"scancel; not retried"):  # fmt: skip
        operator(run).execute_complete(context(store), event(kwargs, cluster))
    assert len(cluster.calls("sbatch")) == 1
    (only,) = attempts(run)
    assert only["kind"] == "cancelled" and not only["retryable"]


def test_a_kill_cancels_the_job_and_a_clear_goes_on_after_it(run, cluster):
    """The trigger's on_kill notes an Airflow kill and cancels the job; the cleared task's next
    try reads that job as cancelled (nobody read it) and submits the next attempt."""
    import asyncio

    from ffjobs.airflow.hooks import claim_watch
    from ffjobs.airflow.triggers import SlurmJobTrigger

    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    trigger = SlurmJobTrigger(**kwargs)
    assert claim_watch(kwargs["owner_file"], "100", kwargs["token"], trigger.watcher)
    asyncio.run(trigger.on_kill())
    assert cluster.jobs()["100"]["state"] == "CANCELLED by 0"

    again = deferred(lambda: operator(run).execute(context(store, try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("101", 2)
    (first,) = attempts(run)
    assert first["job_id"] == "100" and first["kind"] == "cancelled", first
    assert "through an Airflow kill of the task" in first["summary"]
