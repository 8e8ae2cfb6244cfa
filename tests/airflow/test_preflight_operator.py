"""The deferring preflight operator against a fake SLURM at the subprocess boundary
(:mod:`fake_slurm`): on the cluster profile ``execute`` submits the preflight's job and defers
(no rank failure watch: the preflight's ranks leave none), re-attaches instead of submitting
again (the task state store, the preflight folder's note, SLURM accounting by the run's
preflight job name), replaces a job that was cancelled unread, and ``execute_complete`` reads
the ended job into the report and the stage's outcome as the plain task recorded it; a watch
that ends without an answer cancels the job. The local profile runs the stage on the worker.
The real cluster and the real Airflow run the SLURM path in
tests/integration/test_airflow_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from fake_slurm import FakeSlurm
from test_train_operator import Store, context, deferred

from ffjobs.airflow.hooks import read_owner
from ffjobs.airflow.operators import STORE_KEY, PreflightOperator
from ffjobs.config import load_config
from ffjobs.preflight.launch import job_logs, noted_folder
from ffjobs.runs.run import create_run

SWEEP = [{"size_bytes": 2**20, "iters": 20, "time_s": 1e-3, "algbw_gbps": 1.0, "busbw_gbps": 1.0}]


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "fake-slurm")
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    return fake


def make_run(tmp_path: Path, *overrides: str, preset: str = "clusters/minicluster"):
    config = load_config(
        preset, ["tracking.enabled=false", f"slurm.folder={tmp_path / 'jobs'}", *overrides]
    )
    return create_run(config, echo=lambda line: None)


@pytest.fixture
def run(tmp_path, cluster):
    return make_run(tmp_path)


def operator(run) -> PreflightOperator:
    return PreflightOperator(task_id="preflight", state={"run_dir": str(run.dir)}, poll_s=1)


def event(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The trigger's event for the job ``kwargs`` watch, as the fake cluster says it ended."""
    from ffjobs.airflow.triggers import status_payload
    from ffjobs.slurm.jobstate import poll_jobs

    status = poll_jobs([kwargs["job_id"]])[kwargs["job_id"]]
    return {**{k: kwargs[k] for k in ("job_id", "attempt", "submitted_at", "token")},
            "status": status_payload(status), "unconfirmed": []}  # fmt: skip


def preflight_folder(run, job_id: str) -> Path:
    folder = noted_folder(run.dir / "preflight", job_id)
    assert folder is not None, f"no preflight folder notes job {job_id}"
    return folder


def ranks_passed(folder: Path) -> None:
    """What the job's two ranks leave behind when the fabric is fine."""
    (folder / "ranks").mkdir()
    for rank, node in enumerate(("node1", "node2")):
        record = {
            "rank": rank, "local_rank": 0, "node": node, "status": "ok",
            "probe": {"node": node, "torch": "2.11.0"}, "env_findings": [], "group_checks": {},
            "world": {"size": 2, "nodes": ["node1", "node2"], "dtype": "float32"},
            **({"sweep": SWEEP} if rank == 0 else {}),
        }  # fmt: skip
        (folder / "ranks" / f"rank-{rank:05d}.json").write_text(json.dumps(record))


def stage_record(run) -> dict[str, Any]:
    record = json.loads((run.dir / "run.json").read_text())
    (preflight,) = [s for s in record["stages"] if s["name"] == "preflight"]
    return preflight


def test_execute_submits_the_preflight_job_keeps_it_and_defers(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    assert (kwargs["job_id"], kwargs["attempt"]) == ("100", 1)
    assert len(cluster.calls("sbatch")) == 1
    job = cluster.jobs()["100"]
    # found by the run's name if its id were lost; never taken for one of the run's trainings
    assert job["name"] == f"{run.key}-preflight"
    assert f"ffjobs run {run.key} preflight" in job["comment"]  # sbatch's quoted directive
    assert store.get(STORE_KEY)["job_id"] == "100"
    assert kwargs["folder"] is None  # no rank failure watch: the preflight's ranks leave none
    owner = run.dir / "preflight" / "slurm-owner.json"
    assert kwargs["owner_file"] == str(owner.resolve())
    assert read_owner(owner) == {"job_id": "100", "token": kwargs["token"]}
    folder = preflight_folder(run, "100")
    assert (folder / "job.json").is_file()  # what the ranks read
    assert not (run.dir / "train").exists()  # the training's owner file is its own


def test_a_passed_job_records_the_stage_as_the_plain_task_did(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    ranks_passed(preflight_folder(run, "100"))
    cluster.end("100", "COMPLETED")
    xcom = operator(run).execute_complete(context(store), event(kwargs))
    assert set(xcom) == {"run_key", "run_dir", "mlflow_run_id", "preflight_verdict",
                         "preflight_report"}  # fmt: skip
    assert xcom["run_key"] == run.key and xcom["preflight_verdict"] == "PASS"
    report = json.loads(Path(xcom["preflight_report"]).read_text())
    assert report["mode"] == "slurm" and report["nodes"] == ["node1", "node2"]
    stage = stage_record(run)
    assert stage["status"] == "passed" and stage["facts"]["verdict"] == "PASS"
    assert store.get("started_at") is None  # the stage's time is recorded; the next starts anew
    assert len(cluster.calls("sbatch")) == 1


def test_a_job_that_failed_before_its_ranks_wrote_fails_the_task_for_good(run, cluster):
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    folder = job_logs(run.config, run.key, 1, "100")  # the job's own logs, as submitit names them
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "100_0_log.err").write_text(
        "Traceback (most recent call last):\nModuleNotFoundError: No module named 'ffjobs'\n"
        "srun: error: node1: task 0: Exited with exit code 1\n"
    )
    cluster.end("100", "FAILED", exit_code=1)
    with pytest.raises(AirflowFailException, match="preflight failed: FAIL") as raised:
        operator(run).execute_complete(context(store), event(kwargs))
    assert "SLURM job 100 failed (FAILED, exit code 1: ModuleNotFoundError" in str(raised.value)
    stage = stage_record(run)
    assert stage["status"] == "failed" and stage["facts"]["verdict"] == "FAIL"
    record = json.loads((run.dir / "run.json").read_text())
    assert record["status"] == "failed"  # the run ended with its preflight
    assert len(cluster.calls("sbatch")) == 1  # a preflight job is never retried


def test_a_retry_re_attaches_to_the_live_job_instead_of_submitting(run, cluster):
    store = Store()
    first = deferred(lambda: operator(run).execute(context(store)))
    again = deferred(lambda: operator(run).execute(context(store, try_number=2)))
    assert again["job_id"] == "100" and len(cluster.calls("sbatch")) == 1
    # the job is the new try's now: a late kill of the first try's trigger cancels nothing
    assert again["token"] != first["token"] and again["token"].startswith("2:")
    assert len(list((run.dir / "preflight").glob("*/job.json"))) == 1  # no second preflight


def test_a_job_whose_id_was_never_noted_is_found_by_the_runs_preflight_name(run, cluster):
    """The worker died right after sbatch: neither the store nor the folder's note has the id."""
    deferred(lambda: operator(run).execute(context(Store())))
    folder = preflight_folder(run, "100")
    note = json.loads((folder / "slurm-job.json").read_text())
    del note["job_id"]
    (folder / "slurm-job.json").write_text(json.dumps(note))
    again = deferred(lambda: operator(run).execute(context(Store(), try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("100", 1)
    assert len(cluster.calls("sbatch")) == 1
    assert any(f"{run.key}-preflight" in call for call in cluster.calls("sacct"))
    assert preflight_folder(run, "100") == folder  # noted again


def killed_right_after_sbatch(run, cluster, job_id: str, *, task_left: bool = True) -> Path:
    """Leave the preflight job ``job_id`` as a worker killed the moment sbatch answered leaves
    it (:meth:`FakeSlurm.killed_right_after_sbatch`): its id in no store and no note. Returns
    the preflight's folder."""
    from ffjobs.preflight.launch import job_folder

    folder = preflight_folder(run, job_id)
    cluster.killed_right_after_sbatch(
        job_id, job_folder(run.config, run.key, 1), task_left=task_left
    )
    note = json.loads((folder / "slurm-job.json").read_text())
    del note["job_id"]
    (folder / "slurm-job.json").write_text(json.dumps(note))
    return folder


def test_the_job_is_submitted_held_and_released_once_its_folder_is_complete(run, cluster):
    """A job SLURM starts before submitit made its folder has nowhere to write its output
    (slurmd fails it at once) and no task to run: it is released only once both are there."""
    deferred(lambda: operator(run).execute(context(Store())))
    assert len(cluster.calls("sbatch")) == 1
    assert "#SBATCH --hold" in Path(cluster.jobs()["100"]["command"]).read_text()
    assert ["scontrol", "release", "100"] in cluster.calls("scontrol")
    assert not cluster.jobs()["100"]["held"]


def test_a_job_left_held_by_a_killed_worker_is_finished_and_released(run, cluster):
    deferred(lambda: operator(run).execute(context(Store())))
    folder = killed_right_after_sbatch(run, cluster, "100")
    again = deferred(lambda: operator(run).execute(context(Store(), try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("100", 1)
    assert len(cluster.calls("sbatch")) == 1 and not cluster.jobs()["100"]["held"]
    assert preflight_folder(run, "100") == folder  # noted again
    logs = job_logs(run.config, run.key, 1, "100")
    assert sorted(p.name for p in logs.glob("*.pkl")) == ["100_submitted.pkl"]


def test_a_job_left_held_without_its_task_is_cancelled_and_a_new_one_submitted(run, cluster):
    deferred(lambda: operator(run).execute(context(Store())))
    killed_right_after_sbatch(run, cluster, "100", task_left=False)
    again = deferred(lambda: operator(run).execute(context(Store(), try_number=2)))
    assert cluster.jobs()["100"]["state"].startswith("CANCELLED")
    assert again["job_id"] == "101" and len(cluster.calls("sbatch")) == 2


def test_a_job_that_ended_unwatched_is_read_by_the_next_try_without_deferring(run, cluster):
    """The try that deferred failed before its trigger's event was read (Airflow 3.3's
    scheduler race after a trigger that fires within seconds): the retry reads the ended job
    itself, with the same report and XCom as the trigger's path, and defers to nothing."""
    store = Store()
    deferred(lambda: operator(run).execute(context(store)))
    ranks_passed(preflight_folder(run, "100"))
    cluster.end("100", "COMPLETED")
    xcom = operator(run).execute(context(store, try_number=2))  # no TaskDeferred
    assert xcom["preflight_verdict"] == "PASS" and len(cluster.calls("sbatch")) == 1
    assert (preflight_folder(run, "100") / "report.json").is_file()
    assert stage_record(run)["status"] == "passed"
    # read once: a further try finds nothing unread and submits a new preflight
    later = deferred(lambda: operator(run).execute(context(Store(), try_number=3)))
    assert later["job_id"] == "101"


def test_a_job_accounting_lost_but_the_controller_still_runs_is_watched_on(run, cluster):
    """The trigger gave up on accounting (no record for long); the controller still queues the
    job: it is watched again, never read as ended."""
    store = Store()
    kwargs = deferred(lambda: operator(run).execute(context(store)))
    cluster.forget("100")
    lost = {**event(kwargs), "status": None}
    again = deferred(lambda: operator(run).execute_complete(context(store), lost))
    assert again["job_id"] == "100" and len(cluster.calls("sbatch")) == 1
    assert not (preflight_folder(run, "100") / "report.json").exists()


def test_a_job_cancelled_unread_is_replaced_by_a_new_preflight(run, cluster):
    """A clear or a kill cancelled the job while nobody read it: it says nothing of the fabric."""
    store = Store()
    deferred(lambda: operator(run).execute(context(store)))
    cluster.end("100", "CANCELLED by 0", nodes=())
    again = deferred(lambda: operator(run).execute(context(store, try_number=2)))
    assert (again["job_id"], again["attempt"]) == ("101", 2)
    assert cluster.jobs()["101"]["name"] == f"{run.key}-preflight"
    old = json.loads((preflight_folder(run, "100") / "report.json").read_text())
    assert old["verdict"] == "FAIL" and "SLURM job 100 failed (CANCELLED" in old["reasons"][0]
    assert preflight_folder(run, "101") != preflight_folder(run, "100")


def test_a_watch_that_ends_without_an_answer_cancels_the_job(run, cluster):
    store = Store()
    deferred(lambda: operator(run).execute(context(store)))
    with pytest.raises(AirflowFailException, match="preflight: the watch of the SLURM job"):
        operator(run).resume_execution("__fail__", {"error": "Trigger timeout"}, context(store))
    assert cluster.calls("scancel") == [["scancel", "100"]]
    assert cluster.jobs()["100"]["state"].startswith("CANCELLED")


def test_a_later_trys_job_is_not_cancelled_by_an_earlier_watch(run, cluster):
    """The owner file names the try that watches the job now; an older try's end cancels nothing."""
    first = Store()
    deferred(lambda: operator(run).execute(context(first)))
    stale = Store()
    stale.values = json.loads(json.dumps(first.values))
    deferred(lambda: operator(run).execute(context(first, try_number=2)))
    with pytest.raises(AirflowFailException):
        operator(run).resume_execution("__fail__", {"error": "Trigger failure"}, context(stale))
    assert cluster.calls("scancel") == []


def test_the_local_profile_runs_the_preflight_on_the_worker(tmp_path, cluster):
    run = make_run(tmp_path, "slurm.tasks_per_node=1", "preflight.sizes_mib=[1]",
                   "preflight.target_time_s=0.05", preset="local")  # fmt: skip
    xcom = operator(run).execute(context(Store()))
    assert xcom["preflight_verdict"] in ("PASS", "WARN")
    assert json.loads(Path(xcom["preflight_report"]).read_text())["mode"] == "local"
    assert cluster.calls("sbatch") == []
