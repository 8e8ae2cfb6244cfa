"""The DAG run's note, written when the run ends from the lines its tasks handed to
:func:`ffjobs.airflow.tasks.note` (XCom ``ffjobs_dag_run_note``): what a person should read first
(a blocked gate, the registered version, the failure that stopped it), shown in the grid.

A listener of the scheduler: it runs in the scheduler's session as the DAG run's state changes,
so setting ``dag_run.note`` there is committed with the new state. A note a person wrote (it
has a user) is left as it is.
"""

from __future__ import annotations

from typing import Any

from airflow.listeners import hookimpl

NOTE_KEY = "ffjobs_dag_run_note"
"""The XCom key of a task's line for the DAG run's note."""

NOTE_LIMIT = 1000
"""Airflow keeps a DAG run's note in a 1000-character column."""


def compose_note(lines: list[str]) -> str | None:
    """The note from the tasks' lines, in order, each once; cut to :data:`NOTE_LIMIT`."""
    kept = list(dict.fromkeys(line.strip() for line in lines if line and line.strip()))
    if not kept:
        return None
    text = "\n".join(kept)
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 3] + "..."


def write_note(dag_run: Any) -> None:
    """Set ``dag_run``'s note from its tasks' lines, unless a person wrote one."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is None:
        return
    own = dag_run.dag_run_note
    if own is not None and own.user_id is not None:
        return
    rows = session.scalars(
        select(XComModel)
        .where(XComModel.dag_run_id == dag_run.id, XComModel.key == NOTE_KEY)
        .order_by(XComModel.timestamp)
    )
    text = compose_note([str(XComModel.deserialize_value(row)) for row in rows])
    if text is not None:
        dag_run.note = text


class DagRunNoteListener:
    """Writes the note when a DAG run succeeds or fails."""

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        write_note(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        write_note(dag_run)
