"""Trigger ``ffjobs_pipeline`` through REST, follow its DAG run in the terminal, and say how it
ended: what ran, whether an injected failure happened and was recovered from, and what to do
next (the Airflow UI and login, the MLflow UI, the one-line approval).

Standard library and ffjobs only: no Airflow import (the command runs outside Airflow).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ffjobs.airflow.embedded import DAG_ID, AirflowClient

RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"
ENDED = ("success", "failed")
AWAITING_REVIEW = "awaiting_input"
COMMUNICATOR_DRILL = "train.faults.raise_in_collective_at_step"


def communicator_failure_step(steps: int, checkpoint_every: int) -> int:
    """Where an injected communicator failure goes: just past the first verified checkpoint
    (the retry resumes from it), or half-way when the run writes no checkpoint before its end."""
    return checkpoint_every + 1 if checkpoint_every < steps else max(1, steps // 2)


def trigger(client: AirflowClient, conf: dict[str, Any]) -> str:
    """A new DAG run of ``conf``; its id."""
    body = client.expect("POST", RUNS, {"logical_date": None, "conf": conf})
    return str(body["dag_run_id"])


@dataclass
class Followed:
    """How a followed DAG run stands when following ended."""

    run_state: str
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def awaiting_review(self) -> list[str]:
        return [t for t, ti in self.tasks.items() if ti.get("state") == AWAITING_REVIEW]


def follow(
    client: AirflowClient,
    run_id: str,
    *,
    echo: Callable[[str], None] = print,
    poll_s: float = 2.0,
    timeout_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Followed:
    """Print each task's state as it changes until the DAG run finishes or a task waits for a
    person (``awaiting_input``: a review); ``timeout_s`` None follows as long as it takes."""
    seen: dict[str, tuple[Any, Any]] = {}
    deadline = None if timeout_s is None else clock() + timeout_s
    while True:
        tasks = task_instances(client, run_id)
        for task_id, ti in tasks.items():
            now = (ti.get("state"), ti.get("try_number"))
            if seen.get(task_id) != now and ti.get("state") is not None:
                try_number = ti.get("try_number") or 1
                tries = f" (try {try_number})" if try_number > 1 else ""
                echo(f"{time.strftime('%H:%M:%S')}  {task_id:<10} {ti['state']}{tries}")
            seen[task_id] = now
        state = client.expect("GET", f"{RUNS}/{run_id}")["state"]
        followed = Followed(state, tasks)
        if state in ENDED or followed.awaiting_review:
            return followed
        if deadline is not None and clock() > deadline:
            echo(f"stopped following after {timeout_s:.0f} s: DAG run {run_id} is {state}")
            return followed
        sleep(poll_s)


def task_instances(client: AirflowClient, run_id: str) -> dict[str, dict[str, Any]]:
    body = client.expect("GET", f"{RUNS}/{run_id}/taskInstances")
    return {ti["task_id"]: ti for ti in body["task_instances"]}


def xcom(client: AirflowClient, run_id: str, task_id: str, key: str) -> Any:
    """One XCom value of the DAG run (None if the task pushed none)."""
    status, body = client.get(f"{RUNS}/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
    if status != 200:
        return None
    value = body["value"]
    if isinstance(value, str):  # stored JSON, as the task wrote it
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def read_attempts(run_dir: Path) -> list[dict[str, Any]]:
    """The run's training attempts (``train/attempts.jsonl``; data only)."""
    path = run_dir / "train" / "attempts.jsonl"
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    attempts = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            attempts.append(entry)
    return attempts


def recovery_lines(attempts: Sequence[dict[str, Any]], injected_at: int | None) -> list[str]:
    """What happened to the injected failure, as the run's attempt log tells it."""
    if injected_at is None:
        return []
    failed = [a for a in attempts if a.get("kind") == "communicator"]
    after = [a for a in attempts if failed and a.get("number", 0) > failed[0].get("number", 0)]
    recovered = [a for a in after if a.get("kind") is None]
    if not failed:
        return [
            f"injected communicator failure at step {injected_at}: it did NOT happen "
            "(no communicator failure in the run's attempt log)"
        ]
    first = failed[0]
    why = str(first.get("summary") or "communicator failure").split(";")[0]  # the verdict
    lines = [
        f"injected communicator failure at step {injected_at}: attempt {first.get('number')} "
        f"failed ({why}; the whole record: train/attempts.jsonl)"
    ]
    if recovered:
        last = recovered[-1]
        lines.append(
            f"  recovered: attempt {last.get('number')} resumed from the checkpoint at step "
            f"{last.get('start_step')} and trained to step {last.get('final_step')} "
            f"({first.get('steps_lost', 0)} steps redone)"
        )
    else:
        lines.append("  NOT recovered: no later attempt finished")
    return lines
