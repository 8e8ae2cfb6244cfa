"""A run records its owner; a running run whose owner is gone is shown as abandoned, one owned
elsewhere (another host, an Airflow DAG run) as running, not checked from here."""

from __future__ import annotations

import os
import socket
import subprocess

from ffjobs.config import Config
from ffjobs.process_tree import boot_id, process_start_time
from ffjobs.runs.owner import found_on_resume, owner_record, run_state
from ffjobs.train.checkpoint import latest_step


def _record(**owner) -> dict:
    return {"status": "running", "owner": {**owner_record(), **owner}}


def _gone_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_owner_is_this_process_of_this_boot_on_this_host():
    owner = owner_record()
    assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    assert owner["start_time"] == process_start_time(os.getpid())
    assert owner["boot_id"] == boot_id() and boot_id()
    assert run_state({"status": "running", "owner": owner}) == (
        "running",
        f"running (owner pid {os.getpid()})",
    )


def test_a_run_whose_owner_is_gone_is_abandoned(tmp_path):
    host = socket.gethostname()
    pid = _gone_pid()
    record = {**_record(pid=pid), "checkpoint_dir": str(tmp_path)}
    assert run_state(record) == ("abandoned", f"abandoned (owner pid {pid} on host {host} is gone)")
    # the same pid, but another process (pid reuse), or the same numbers before a reboot
    reused = _record(start_time=process_start_time(os.getpid()) - 1)
    assert run_state(reused)[0] == "abandoned"
    assert run_state(_record(boot_id="another-boot"))[1].endswith(", rebooted since, is gone)")
    assert found_on_resume("k", record, Config(), latest_step) == (
        f"run k was left running by pid {pid} on {host}, which is gone; no verified checkpoint"
    )


def test_runs_owned_elsewhere_or_ended_are_taken_as_recorded():
    other = _record(host="gpu-node-7", pid=_gone_pid())
    assert run_state(other) == ("running", "running on gpu-node-7 (not checkable here)")
    airflow = _record(pid=_gone_pid(), airflow={"dag_id": "ffjobs_pipeline", "run_id": "manual"})
    assert run_state(airflow) == ("running", "running in Airflow DAG run ffjobs_pipeline / manual")
    ended = {**_record(pid=_gone_pid()), "status": "failed"}
    assert (
        run_state(ended) == ("failed", "failed") and found_on_resume("k", ended, Config()) is None
    )
    assert run_state({"status": "running"}) == ("running", "running")  # recorded before owners
