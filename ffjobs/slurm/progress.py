"""Rank 0's progress record of a SLURM job: each start of the training (the step it began
from, when its first step was done) and each step it reported, as JSON lines in a file that
the supervisor (:mod:`ffjobs.train.slurm_job`), ``ffjobs bench recovery`` and the drills read,
instead of the wording of the rank logs (which ``train.progress: false`` silences anyway).

The SLURM task names the file in :data:`PROGRESS_ENV`: ``<job folder>/<job id>_progress.jsonl``,
one per job; a requeued job, or a restart inside the allocation, appends to the same file. A
line is appended whole, in one ``write`` far below the size a file system appends atomically,
and a reader skips a line cut short by a crash. Without the variable (a local launch, a
benchmark) nothing is written.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRESS_ENV = "FFJOBS_PROGRESS_FILE"


def progress_file(job_folder: str | Path, job_id: str) -> Path:
    """The record of SLURM job ``job_id`` in its submitit folder."""
    return Path(job_folder) / f"{job_id}_progress.jsonl"


@dataclass(frozen=True)
class Start:
    """One start of the ranks: when its first step was done, from which step, what it reached."""

    first_step_at: float
    start_step: int
    steps: tuple[int, ...] = ()


class ProgressRecord:
    """The writer, on rank 0 (any other rank, or no file named: a record that writes nothing).

    A write that fails (a full or vanished folder) is warned about once and training goes on:
    the record describes the training, it is no reason to stop it.
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    @classmethod
    def for_rank(cls, rank: int) -> ProgressRecord:
        return cls(os.environ.get(PROGRESS_ENV) if rank == 0 else None)

    def first_step(self, start_step: int, at: float) -> None:
        self._append({"start": start_step, "first_step_at": round(at, 3)})

    def reached(self, step: int, at: float) -> None:
        self._append({"step": step, "at": round(at, 3)})

    def _append(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = (json.dumps(record) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as exc:
            warnings.warn(
                f"progress record {self.path}: cannot write ({exc.strerror or exc}); the "
                "supervisor will not see this start's steps",
                stacklevel=3,
            )
            self.path = None


def read_starts(path: str | Path) -> list[Start]:
    """Every start in the record at ``path``, in order (none if there is no record yet)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    begun: list[tuple[float, int, list[int]]] = []  # each start's steps, gathered in place
    for line in text.splitlines():
        try:
            record = json.loads(line)
            if "start" in record:
                begun.append((float(record["first_step_at"]), int(record["start"]), []))
            elif "step" in record and begun:
                begun[-1][2].append(int(record["step"]))
        except (ValueError, TypeError, KeyError):  # cut short by a crash, or not ours
            continue
    return [Start(at, step, tuple(steps)) for at, step, steps in begun]


def summary(starts: list[Start]) -> dict[str, Any]:
    """Where a run of starts began, when its first step was done, and the last step reached."""
    steps = [step for start in starts for step in start.steps]
    return {
        "start_step": starts[0].start_step if starts else None,
        "first_step_at": starts[0].first_step_at if starts else None,
        "final_step": steps[-1] if steps else None,
    }
