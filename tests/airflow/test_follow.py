"""Following a DAG run from the terminal (``ffjobs airflow trigger``) against a scripted REST
client: a line per state change, the stop at a review or the run's end, and an honest account
of an injected failure read from the run's attempt log."""

from __future__ import annotations

from typing import Any

from ffjobs.airflow import follow
from ffjobs.errors import ExitCode, failure_exit_code


class ScriptedClient:
    """Answers each poll with the next of ``polls``: (task states, DAG run state)."""

    def __init__(self, polls: list[tuple[dict[str, Any], str]]):
        self.polls, self.index = polls, -1

    def expect(self, method: str, path: str, body: Any = None) -> Any:
        if path.endswith("/taskInstances"):
            self.index = min(self.index + 1, len(self.polls) - 1)
            tasks = self.polls[self.index][0]
            return {"task_instances": [{"task_id": t, **ti} for t, ti in tasks.items()]}
        return {"state": self.polls[self.index][1]}


def ti(state: str | None, try_number: int = 1) -> dict[str, Any]:
    return {"state": state, "try_number": try_number}


def run_follow(polls) -> tuple[follow.Followed, list[str]]:
    lines: list[str] = []
    followed = follow.follow(ScriptedClient(polls), "r1", echo=lines.append, sleep=lambda s: None)
    return followed, [line.split("  ", 1)[1] for line in lines]  # without the clock


def test_each_change_is_printed_once_and_a_retry_names_its_try():
    followed, lines = run_follow(
        [
            ({"validate": ti("running"), "train": ti(None)}, "running"),
            ({"validate": ti("running"), "train": ti(None)}, "running"),
            ({"validate": ti("success"), "train": ti("running")}, "running"),
            ({"validate": ti("success"), "train": ti("up_for_retry")}, "running"),
            ({"validate": ti("success"), "train": ti("running", 2)}, "running"),
            ({"validate": ti("success"), "train": ti("success", 2)}, "success"),
        ]
    )
    assert followed.run_state == "success" and not followed.awaiting_review
    assert [line.split() for line in lines] == [
        ["validate", "running"],
        ["validate", "success"],
        ["train", "running"],
        ["train", "up_for_retry"],
        ["train", "running", "(try", "2)"],
        ["train", "success", "(try", "2)"],
    ]


def test_following_stops_at_a_review_while_the_run_still_runs():
    followed, _ = run_follow(
        [
            ({"register": ti("running"), "review": ti(None)}, "running"),
            ({"register": ti("success"), "review": ti("awaiting_input")}, "running"),
            ({"register": ti("success"), "review": ti("success")}, "success"),  # never reached
        ]
    )
    assert followed.run_state == "running" and followed.awaiting_review == ["review"]


def test_a_failed_run_ends_the_following():
    followed, lines = run_follow([({"train": ti("failed", 2)}, "failed")])
    assert followed.run_state == "failed" and lines[-1].split()[:2] == ["train", "failed"]


def attempt(number: int, kind: str | None, start: int, final: int, **more: Any) -> dict:
    return {"number": number, "kind": kind, "start_step": start, "final_step": final, **more}


def test_a_recovered_failure_is_told_with_where_it_resumed():
    attempts = [
        attempt(
            1,
            "communicator",
            0,
            50,
            summary="communicator failure (gloo); suspect none",
            steps_lost=1,
        ),
        attempt(2, None, 50, 200),
    ]
    lines = follow.recovery_lines(attempts, 51)
    assert "attempt 1 failed (communicator failure (gloo); the whole record" in lines[0]
    assert "recovered: attempt 2 resumed from the checkpoint at step 50" in lines[1]
    assert "trained to step 200" in lines[1]


def test_a_failure_that_did_not_happen_or_was_not_recovered_is_said_so():
    assert "did NOT happen" in follow.recovery_lines([attempt(1, None, 0, 200)], 51)[0]
    failed = [attempt(1, "communicator", 0, 50)]
    assert "NOT recovered" in follow.recovery_lines(failed, 51)[1]
    assert follow.recovery_lines([], None) == []  # nothing injected: nothing to tell


def test_the_failure_goes_just_past_the_first_checkpoint():
    assert follow.communicator_failure_step(steps=200, checkpoint_every=50) == 51
    assert follow.communicator_failure_step(steps=20, checkpoint_every=50) == 10


def test_a_retryable_training_failure_exits_retryable_on_local_ranks_as_on_slurm():
    # the Airflow task retries only a RETRYABLE stage: a communicator failure of local ranks
    # must be one, as it is on SLURM
    assert failure_exit_code("communicator", True) == ExitCode.RETRYABLE
    assert failure_exit_code("user_code", False) == ExitCode.FAILED
    assert failure_exit_code("storage", False) == ExitCode.STORAGE
    assert failure_exit_code("cancelled", False) == ExitCode.CANCELLED
