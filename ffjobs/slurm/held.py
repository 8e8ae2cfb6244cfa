"""Jobs submitted held, released once their folder is complete; and the finishing of a
submission whose submitter died in between.

submitit writes a job's script and pickled task in the attempt's folder under names of their
own, calls ``sbatch``, and only then, knowing the job id, makes the job's folder
(``attempt-<n>/<job id>``) and moves them in. A job that SLURM starts before that has no folder
to write its output to (slurmd fails the job at once: ``Could not open stdout file``) and no
task to run. On an idle cluster SLURM starts a job within milliseconds of ``sbatch``: every job
ffjobs submits (training attempts, preflights) is submitted held and released once its folder
is complete.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffjobs.slurm.accounting import AccountingError, run_command
from ffjobs.slurm.executor import job_folder

if TYPE_CHECKING:
    import submitit

_HELD = re.compile(r"\bJobState=PENDING\b.*\bReason=JobHeldUser\b")
_COMMAND = re.compile(r"\bCommand=(\S+)")


def submit_held(
    executor: submitit.AutoExecutor,
    fn: Callable[..., Any],
    *args: Any,
    sbatch: dict[str, Any] | None = None,
) -> str:
    """Submit ``fn(*args)`` held (with the extra ``sbatch`` options), release it once submitit
    has put its task and script in its folder, and return its job id. sbatch's refusal raises
    what ``executor.submit`` raises."""
    executor.update_parameters(slurm_additional_parameters={**(sbatch or {}), "hold": True})
    job_id = str(executor.submit(fn, *args).job_id)
    run_command(["scontrol", "release", job_id])  # its folder is complete: it may start
    return job_id


def finish_held(job_id: str, base: str | Path, run_id: str) -> tuple[bool, int | None]:
    """Finish the submission of a job of run ``run_id`` (folders under ``base``) that its
    submitter left unfinished, and release it: ``(True, its attempt number)``; ``(True,
    None)``: it was cancelled (see below); ``(False, None)``: not such a job.

    A submitter killed between ``sbatch`` and the release leaves the job held with its task
    and script where submitit put them first; here they are moved as submitit would have and
    the job released: the same job runs, and no second one is submitted. A held job whose task
    is gone could never run: it is cancelled. A held job whose submission was finished is
    someone's ``scontrol hold``: left as it is."""
    from submitit.core.utils import JobPaths

    try:
        shown = run_command(["scontrol", "show", "job", "-o", job_id])
    except AccountingError:  # the controller forgot it: long ended
        return False, None
    script = _COMMAND.search(shown)
    if not _HELD.search(shown) or script is None:
        return False, None
    script_path = Path(script.group(1))
    number = script_path.parent.name.removeprefix("attempt-")
    runs = job_folder(base, run_id, 0).parent.parent
    if (
        not number.isdigit()
        or script_path.parent.resolve() != (runs / f"attempt-{number}").resolve()
    ):
        return False, None  # not one of this run's attempts
    paths = JobPaths(job_folder(base, run_id, int(number)), job_id)
    # submitit's task waits beside the script under a name of its own; an attempt is one
    # submission, so one such file is this job's (two: which is unknowable, none is used)
    tasks = list(script_path.parent.glob("*.pkl"))
    unfinished = script_path.is_file() and not script_path.is_symlink()
    if len(tasks) == 1 and not paths.submitted_pickle.exists():
        paths.move_temporary_file(tasks[0], "submitted_pickle")
        unfinished = True
    if not unfinished:
        return False, None
    if not paths.submitted_pickle.exists():
        run_command(["scancel", job_id])
        return True, None
    if script_path.is_file() and not script_path.is_symlink():
        paths.move_temporary_file(script_path, "submission_file", keep_as_symlink=True)
    run_command(["scontrol", "release", job_id])
    return True, int(number)
