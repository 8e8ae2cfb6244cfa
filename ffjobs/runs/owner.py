"""Who holds a run, and whether it still does: a run whose owner is gone says so.

The process that creates or resumes a run (its owner, :mod:`ffjobs.runs.run`) writes itself
into ``run.json`` as ``owner``: pid, start time (clock ticks since boot, from
``/proc/<pid>/stat``), boot id and host name, and in an Airflow task the DAG run it belongs to.
A record that still says ``running`` is read against it (:func:`run_state`):

* on this host and boot, the owner pid alive with that start time: ``running``;
* otherwise on this host: ``abandoned (owner pid N on host H is gone)``: the command was
  killed (its local processes died with it, :mod:`ffjobs.process_tree`), or the machine
  rebooted; ``ffjobs run --resume KEY`` continues it (and says what it found,
  :func:`found_on_resume`). SLURM jobs it submitted are not its processes: they may still run;
* on another host: ``running on H (not checkable here)``;
* created or resumed in an Airflow task: the later tasks of its DAG run hold it (attached,
  not owners), so it is ``running`` while the DAG run goes on, and no process here can tell
  whether it does: Airflow's own view of the DAG run does.

A record without ``owner`` (written before owners were recorded) is taken as it says.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ffjobs.process_tree import boot_id, is_running, process_start_time

if TYPE_CHECKING:
    from ffjobs.config import Config

ABANDONED = "abandoned"


def owner_record() -> dict[str, Any]:
    """This process, as a run's owner."""
    pid = os.getpid()
    owner: dict[str, Any] = {
        "pid": pid,
        "start_time": process_start_time(pid),
        "boot_id": boot_id(),
        "host": socket.gethostname(),
    }
    dag, dag_run = os.environ.get("AIRFLOW_CTX_DAG_ID"), os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if dag and dag_run:
        owner["airflow"] = {"dag_id": dag, "run_id": dag_run}
    return owner


def run_state(record: dict[str, Any]) -> tuple[str | None, str | None]:
    """The run's status as it is (``abandoned`` for a running run whose owner is gone), and
    the same in words, with what it was told by (``abandoned (owner pid N on host H is
    gone)``, ``running on H (not checkable here)``, ...)."""
    status, owner = record.get("status"), record.get("owner")
    if status != "running" or not owner:
        return status, status
    airflow = owner.get("airflow")
    if airflow:
        return status, f"running in Airflow DAG run {airflow['dag_id']} / {airflow['run_id']}"
    host = owner.get("host")
    if host != socket.gethostname():
        return status, f"running on {host} (not checkable here)"
    pid = owner["pid"]
    same_boot = owner.get("boot_id") in (None, boot_id())
    if same_boot and is_running(pid, owner.get("start_time")):
        return status, f"running (owner pid {pid})"
    rebooted = "" if same_boot else ", rebooted since,"
    return ABANDONED, f"{ABANDONED} (owner pid {pid} on host {host}{rebooted} is gone)"


def found_on_resume(
    key: str,
    record: dict[str, Any],
    config: Config,
    latest_step: Callable[[Config, str], int | None] | None = None,
) -> str | None:
    """What a resume says about the run it takes over when the run was not left ended: its
    owner gone (and, given ``latest_step``, :func:`ffjobs.train.checkpoint.latest_step`, the
    step of its latest verified checkpoint), or recorded as running."""
    state, words = run_state(record)
    if state == ABANDONED:
        owner = record["owner"]
        location = record.get("checkpoint_dir")
        if latest_step is None:
            where = "continuing from its latest verified checkpoint, if any"
        else:
            step = latest_step(config, location) if location else None
            where = f"continuing from step {step}" if step is not None else "no verified checkpoint"
        return (
            f"run {key} was left running by pid {owner['pid']} on {owner['host']}, which is "
            f"gone; {where}"
        )
    if state == "running" and (record.get("owner") or {}).get("pid") != os.getpid():
        return f"run {key} is recorded as {words}; taking it over"
    return None
