"""The DAG run's note from its tasks' lines (the listener itself is tested against a real
scheduler in tests/integration/test_airflow_gate.py)."""

from __future__ import annotations

from ffjobs.airflow.run_note import NOTE_LIMIT, compose_note


def test_lines_keep_their_order_once_each():
    lines = ["gate blocked step 4", "", "  ", "gate blocked step 4", "register skipped"]
    assert compose_note(lines) == "gate blocked step 4\nregister skipped"
    assert compose_note([]) is None


def test_a_long_note_is_cut_to_what_airflow_keeps():
    note = compose_note(["x" * (NOTE_LIMIT + 50)])
    assert len(note) == NOTE_LIMIT and note.endswith("...")
