"""Start the preflight ranks: as local processes (``--local``) or as a SLURM job via submitit.

The SLURM job is taken one step at a time, so that the blocking driver (``ffjobs preflight``,
:func:`ffjobs.preflight.runner.run_preflight`) and the deferring Airflow operator
(:class:`ffjobs.airflow.operators.PreflightOperator`) share every step but the wait:
:func:`submit_slurm` (the job id, noted in the preflight's folder at once), a wait for its end
(:func:`wait_for_end` here; the Airflow trigger's asynchronous poll there), and
:func:`ended_job_error` (what the ended job says beyond its ranks' own files). A job whose
submitter died before it could note the id is found again by the run's job name
(:func:`unaccounted_job`).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from ffjobs.errors import UserError
from ffjobs.local_ranks import LaunchFailed, launch_ranks
from ffjobs.slurm.nodes import export_task_rendezvous

RANK_LOG_DIR = "logs"
SLURM_JOB_FILE = "slurm-job.json"
"""In the preflight's folder: its SLURM job (attempt, submission time, then job id)."""
UNKNOWN_FOR_S = 600.0
"""A job no SLURM source knows this long is given up on (its report says so)."""


def launch_local(run_dir: Path, nproc: int, timeout_s: float) -> str | None:
    """Run ``nproc`` ranks on this machine through the shared launcher; return a launch error
    (naming the rank that failed and its log) or None. The report is built from the rank
    files whatever happened, so a failed rank's own record still explains itself."""
    try:
        launch_ranks(
            "ffjobs.preflight.worker",
            lambda rank: [str(run_dir)],
            nproc,
            run_dir / RANK_LOG_DIR,
            preload=("ffjobs.train.distributed",),  # torch.distributed, which every rank imports
            console=io.StringIO(),  # preflight ranks only log; the report speaks for them
            timeout_s=timeout_s,
        )
    except LaunchFailed as exc:
        return str(exc).splitlines()[0]
    return None


def _slurm_rank_entry(run_dir: str) -> int:
    """What each SLURM task runs: rank environment from submitit, then one preflight rank."""
    export_task_rendezvous()
    from ffjobs.preflight.worker import run_rank

    return run_rank(run_dir)


def preflight_nodes(cfg) -> int:
    """Nodes of the preflight job: ``preflight.nodes``, else the training job's."""
    return cfg.preflight.nodes or cfg.slurm.nodes


def job_name(run_key: str) -> str:
    """The preflight job's SLURM name: the run key and the stage (the training's jobs are named
    by the run key alone), so ``sacct --name`` finds a preflight job of the run by itself."""
    return f"{run_key}-preflight"


def job_folder(cfg, run_key: str, attempt: int) -> Path:
    """submitit's folder of the run's preflight attempt ``attempt`` (``%j``: the job id)."""
    from ffjobs.slurm.executor import job_folder as slurm_job_folder

    return slurm_job_folder(cfg.slurm.folder, _run_id(run_key), attempt)


def _run_id(run_key: str) -> str:
    """The preflight's own run id among the cluster profile's job folders."""
    return f"{run_key}.preflight"


def job_logs(cfg, run_key: str, attempt: int, job_id: str) -> Path:
    """The folder of the job's own logs (each task's stdout and stderr)."""
    return Path(str(job_folder(cfg, run_key, attempt)).replace("%j", job_id))


def _make_executor(cfg, run_key: str, attempt: int):
    """The submitit executor of the training job's shape (tasks, GPUs, partition; the nodes of
    :func:`preflight_nodes`), named by the run and kept in the run's own folder
    (``<run key>.preflight/attempt-<n>``)."""
    from ffjobs.slurm.executor import make_executor

    executor = make_executor(cfg, run_id=_run_id(run_key), attempt=attempt)
    # a preflight is a few minutes, not the training job's time limit
    timeout_min = max(1, int(cfg.preflight.timeout_s * 2 // 60) + 1)
    executor.update_parameters(
        nodes=preflight_nodes(cfg),
        timeout_min=timeout_min,
        name=job_name(run_key),
        slurm_comment=f"ffjobs run {run_key} preflight",
    )
    return executor


class SubmissionFailed(RuntimeError):
    """sbatch refused the preflight job; the message is the report's launch error."""


def slurm_attempt(run_dir: Path) -> int:
    """The attempt number of the preflight in ``run_dir``: the run's preflight folders so far,
    this one included (each preflight of a run is a job folder of its own)."""
    return sum(1 for path in run_dir.parent.iterdir() if path.is_dir())


def read_job_note(run_dir: Path) -> dict:
    """The preflight's SLURM job as :func:`submit_slurm` noted it; ``{}`` if none."""
    try:
        note = json.loads((run_dir / SLURM_JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}


def _note_job(run_dir: Path, **fields) -> None:
    path = run_dir / SLURM_JOB_FILE
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps({**read_job_note(run_dir), **fields}), encoding="utf-8")
    partial.replace(path)


def submit_slurm(cfg, run_dir: Path, run_key: str) -> str:
    """Submit the ranks of the preflight prepared in ``run_dir`` as one SLURM job of the run
    ``run_key``; return its job id, noted in ``run_dir`` at once. Raises
    :class:`SubmissionFailed` with sbatch's one-line reason when it says no."""
    from ffjobs.slurm.held import submit_held

    attempt = slurm_attempt(run_dir)
    try:
        executor = _make_executor(cfg, run_key, attempt)
    except ImportError as exc:
        raise UserError(f"SLURM mode needs submitit ({exc}); install it or use --local") from None
    # the attempt first: a job found only by its name is matched to this folder by it
    _note_job(run_dir, attempt=attempt, launched_at=time.time())
    try:
        job_id = submit_held(executor, _slurm_rank_entry, str(run_dir.resolve()))
    except Exception as exc:  # sbatch rejected the job: say why in one line
        raise SubmissionFailed(f"submission failed: {str(exc).strip().splitlines()[-1]}") from None
    _note_job(run_dir, job_id=job_id)
    return job_id


def wait_for_end(job_id: str, poll_s: float = 2.0):
    """Poll the job until it has ended; its :class:`~ffjobs.slurm.jobstate.JobStatus` (an
    ``UNKNOWN`` one once no SLURM source has known the job for :data:`UNKNOWN_FOR_S`)."""
    from ffjobs.slurm.jobstate import poll_jobs

    unknown_since = None
    while True:
        status = poll_jobs([job_id])[job_id]
        if status.is_terminal:
            return status
        if status.source != "none":
            unknown_since = None
        elif unknown_since is None:
            unknown_since = time.monotonic()
        elif time.monotonic() - unknown_since > UNKNOWN_FOR_S:
            return status
        time.sleep(poll_s)


def ended_job_error(cfg, run_dir: Path, run_key: str, status) -> str | None:
    """The launch error of the preflight job that ended with ``status``, or None: a job that did
    not complete and left no rank result is named with its state and the last line of its
    first task's error log; otherwise the ranks' own files explain it in the report."""
    from ffjobs.preflight.worker import RANKS_DIR
    from ffjobs.slurm.jobstate import JobState

    if status.state is JobState.SUCCEEDED or any((run_dir / RANKS_DIR).glob("rank-*.json")):
        return None
    if status.source == "none":
        return f"SLURM job {status.job_id} failed (no SLURM source knows it: {status.reason})"
    detail = status.slurm_state
    if status.exit_code:
        detail += f", exit code {status.exit_code}"
    note = read_job_note(run_dir)
    if "attempt" in note:
        logs = job_logs(cfg, run_key, int(note["attempt"]), status.job_id)
        line = _last_error_line(logs, status.job_id)
        if line:
            detail += f": {line}"
    return f"SLURM job {status.job_id} failed ({detail})"


def _last_error_line(logs: Path, job_id: str) -> str | None:
    """The last line of the first task's stderr that is not SLURM's own (srun, slurmstepd)."""
    from submitit.core.utils import JobPaths

    try:
        tail = JobPaths(logs, job_id=job_id, task_id=0).stderr.read_bytes()[-(1 << 16) :]
    except OSError:
        return None
    text = tail.decode(errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    own = [line for line in lines if not line.startswith(("srun:", "slurmstepd:"))]
    return (own or lines or [None])[-1]


def unaccounted_job(
    cfg, run_key: str, stage_dir: Path, known: str | None = None
) -> tuple[str, Path] | None:
    """(job id, preflight folder) of the run's newest preflight job whose result was never read
    into a report: one still queued or running, or one that ended while nobody watched it.
    ``stage_dir``: the run's ``preflight/`` folder; ``known``: a job id the caller kept (Airflow's
    task state store). Looked for in the preflight folders' notes and, for a job whose id was
    never noted (its submitter died right after ``sbatch``), in SLURM accounting and the queue by
    the run's preflight job name; such a job is matched to its folder by the attempt its submitit folder
    names."""
    from ffjobs.preflight.report import REPORT_JSON
    from ffjobs.slurm.executor import attempt_of
    from ffjobs.slurm.held import finish_held
    from ffjobs.slurm.jobstate import submission_order
    from ffjobs.train.slurm_job import run_jobs

    noted = _noted_folders(stage_dir)
    waiting = {  # attempt -> a folder whose job id was never noted
        int(note["attempt"]): folder
        for folder, note in _notes(stage_dir)
        if not note.get("job_id") and "attempt" in note
    }
    candidates = {*noted, *run_jobs(job_name(run_key))} | ({str(known)} if known else set())
    for job_id in sorted(candidates, key=submission_order, reverse=True):
        folder = noted.get(job_id)
        if folder is None:
            held, attempt = finish_held(job_id, cfg.slurm.folder, _run_id(run_key))
            if held and attempt is None:
                continue  # left held without its task, so cancelled: it never was a preflight
            if not held:
                attempt = attempt_of(cfg.slurm.folder, _run_id(run_key), job_id)
            folder = waiting.get(attempt)
            if folder is None:
                continue  # no preflight folder of the run waits for it: nothing to read it into
            _note_job(folder, job_id=job_id)
        if (folder / REPORT_JSON).exists():
            return None  # the newest job is read: nothing left to attach to
        return job_id, folder
    return None


def noted_folder(stage_dir: Path, job_id: str) -> Path | None:
    """The preflight folder (under the run's ``preflight/``) whose note names ``job_id``."""
    return _noted_folders(stage_dir).get(str(job_id))


def _notes(stage_dir: Path) -> list[tuple[Path, dict]]:
    folders = sorted(p for p in stage_dir.iterdir() if p.is_dir()) if stage_dir.is_dir() else []
    return [(folder, read_job_note(folder)) for folder in folders]


def _noted_folders(stage_dir: Path) -> dict[str, Path]:
    return {str(n["job_id"]): folder for folder, n in _notes(stage_dir) if n.get("job_id")}
