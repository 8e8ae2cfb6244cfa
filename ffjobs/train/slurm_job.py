"""Training as SLURM jobs through submitit: the task every rank runs, and the attempt backend
the retry supervisor drives.

Every attempt is one submitit job of the cluster profile's shape (one task per GPU), named and
commented with the run key, in its own folder ``<slurm.folder>/<run key>/attempt-<n>/``.
``srun --kill-on-bad-exit=1`` stops the other tasks as soon as one exits abnormally, so a
crash is seen at once instead of after the collective timeout, and the failing rank's log is
kept as the evidence.

Pre-emption and time limits: SLURM signals every task with USR2 ahead of time; the trainer
turns that into one consistent checkpoint on every rank and stops, then rank 0 hands over to
submitit's own handler, which pickles the same task again and requeues the job (same job id);
the requeued job resumes from that checkpoint.

A cancel is not undone: ``scancel`` sends SIGTERM, and the ranks checkpoint and stop as for
USR2, but nothing requeues the job (:attr:`ffjobs.train.stop.StopRequest.requeue`). Who or what
cancelled it is read when the attempt ends (:mod:`ffjobs.slurm.cancels`): a cancel ffjobs made
after a rank reported a failure is classified by that failure; any other is the attempt's end,
never retried.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffjobs.slurm import cancels, rank_failures
from ffjobs.slurm.accounting import AccountingError, Runner, run_command
from ffjobs.slurm.failures import RankLog
from ffjobs.slurm.held import finish_held, submit_held
from ffjobs.slurm.jobstate import (
    FAILED_RUN_STATES,
    JOB_ID_PATTERN,
    JobState,
    JobStatus,
    job_runs,
    job_state,
    poll_jobs,
    submission_order,
)
from ffjobs.slurm.progress import PROGRESS_ENV, progress_file, read_starts, summary
from ffjobs.slurm.supervisor import AttemptResult
from ffjobs.train.job import TrainJob


class SubmissionRejected(RuntimeError):
    """sbatch refused the job (bad partition, account, resources)."""


class TrainingTask:
    """What each SLURM task of a training job runs: one rank of the :class:`TrainJob`.

    Its ``checkpoint`` method is what makes submitit requeue it on USR2 (what
    ``submitit.helpers.Checkpointable`` adds); submitit is imported only inside a job, so the
    package stays importable without it.
    """

    def __call__(self, job: TrainJob) -> dict[str, Any]:
        import submitit

        from ffjobs.slurm.nodes import export_task_rendezvous
        from ffjobs.train.worker import run_rank

        here = submitit.JobEnvironment()
        os.environ[PROGRESS_ENV] = str(progress_file(here.paths.folder, here.job_id))
        # submitit installed its requeue handler before calling us; the trainer replaces it
        # with the stop request, and rank 0 gives it back once every rank has checkpointed
        # ahead of a pre-emption or the time limit (never after a cancel: SIGTERM)
        requeue = signal.getsignal(signal.SIGUSR2)
        env = export_task_rendezvous()
        try:
            result = run_rank(job)
        except Exception as exc:  # word for the supervisor, in case SLURM cannot end the job
            node = here.hostnames[here.node]
            rank_failures.report(here.paths.folder, here.job_id, env.rank, node, exc)
            raise
        if result.get("requeue") and env.rank == 0 and callable(requeue):
            requeue(signal.SIGUSR2, None)  # submitit: checkpoint() below, requeue, exit
        return result

    def checkpoint(self, job: TrainJob) -> Any:
        """Requeue the same task: the trainer resumes from the newest verified checkpoint."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(TrainingTask(), job)


class TrainingAgent:
    """The fast path: one task per node runs torch's elastic agent, which starts the node's
    ranks and, when any rank of the job fails, restarts the whole worker group on the same
    nodes (up to ``restarts`` times) before the job itself fails and the supervisor resubmits.
    A restart keeps the allocation: no queueing, no new job; the ranks resume from the newest
    verified checkpoint."""

    def __init__(self, restarts: int, ranks_per_node: int):
        self.restarts, self.ranks_per_node = restarts, ranks_per_node

    def __call__(self, job: TrainJob) -> dict[str, Any]:
        import json
        import sys
        from dataclasses import asdict

        import submitit
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        from ffjobs.slurm.nodes import job_port, node_address

        env = submitit.JobEnvironment()
        folder = Path(env.paths.folder)
        job_file, result_file = folder / f"{env.job_id}_job.json", folder / f"{env.job_id}.json"
        if env.node == 0:
            job_file.write_text(json.dumps(asdict(job), default=str))
        while not job_file.exists():  # the shared folder shows node 0's write soon enough
            time.sleep(0.1)
        # restarted groups need a rendezvous store of their own (pytorch/pytorch#135712)
        os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        master = node_address(env.hostnames[0])
        port = job_port(env.job_id)
        config = LaunchConfig(
            min_nodes=env.num_nodes,
            max_nodes=env.num_nodes,
            nproc_per_node=self.ranks_per_node,
            run_id=f"ffjobs-{env.job_id}",
            rdzv_backend="c10d",
            rdzv_endpoint=f"{master}:{port}",
            rdzv_configs={"is_host": env.node == 0},
            max_restarts=self.restarts,
            monitor_interval=0.2,
            local_addr=node_address(env.hostnames[env.node]),
        )
        os.environ[PROGRESS_ENV] = str(progress_file(folder, env.job_id))  # for rank 0
        requeue = signal.getsignal(signal.SIGUSR2)
        stop = _ForwardStop()
        signal.signal(signal.SIGUSR2, stop.forward)
        argv = ["-m", "ffjobs.train.worker", str(job_file), "--result", str(result_file)]
        elastic_launch(config, sys.executable)(*argv)
        if stop.asked and env.node == 0 and callable(requeue):
            requeue(signal.SIGUSR2, None)  # every rank checkpointed: submitit requeues the job
        return json.loads(result_file.read_text()) if result_file.exists() else {}

    def checkpoint(self, job: TrainJob) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(TrainingAgent(self.restarts, self.ranks_per_node), job)


class _ForwardStop:
    """USR2 reaches the agent; the ranks it started are the ones that must checkpoint."""

    def __init__(self) -> None:
        self.asked = False

    def forward(self, signum: int, _frame: object) -> None:
        self.asked = True
        for pid in _children(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in task.read_text().split()]
    return found


@dataclass
class SlurmAttempts:
    """Attempt backend for :func:`ffjobs.slurm.supervisor.supervise` on a SLURM cluster."""

    config: Any
    """The resolved :class:`ffjobs.config.Config` of the run."""
    run_key: str
    job: TrainJob
    poll_s: float = 2.0
    on_submitted: Callable[[int, str], None] = lambda number, job_id: None
    """Called with (attempt, job id) right after sbatch accepted a job (the run records it)."""
    attach: tuple[int, str] | None = None
    """(attempt number, job id) of a job of this run that no attempt record accounts for yet
    (running, or ended while nobody supervised it): the next attempt reads that job instead of
    submitting one, from the folder of the attempt it was submitted as."""

    def usable_nodes(self, exclude: tuple[str, ...]) -> int | None:
        nodes = partition_nodes(self.config.slurm.partition)
        return None if nodes is None else len([n for n in nodes if n not in exclude])

    def submit(self, number: int, exclude: tuple[str, ...], begin_in_s: float = 0.0) -> str:
        """Submit attempt ``number`` without the ``exclude`` nodes, to start no sooner than
        ``begin_in_s`` from now (a retry's backoff that holds no process: ``sbatch --begin``);
        return its job id. Named by the run key, with the run and attempt in its comment, so a
        job whose id was never recorded is still found (:func:`run_jobs`).

        Raises :class:`SubmissionRejected` with sbatch's one-line reason when it says no.
        """
        from ffjobs.slurm.executor import make_executor

        slurm = self.config.slurm
        executor = make_executor(self.config, run_id=self.run_key, attempt=number)
        excluded = sorted({*slurm.exclude, *exclude})
        begin = {"begin": f"now+{max(1, round(begin_in_s))}"} if begin_in_s > 0 else {}
        executor.update_parameters(
            name=self.run_key,
            slurm_comment=f"ffjobs run {self.run_key} attempt {number}",
            **({"slurm_exclude": ",".join(excluded)} if excluded else {}),
        )
        task: TrainingTask | TrainingAgent = TrainingTask()
        if slurm.restarts_in_allocation:  # one agent per node holds the node's ranks
            executor.update_parameters(
                tasks_per_node=1, cpus_per_task=slurm.cpus_per_task * slurm.tasks_per_node
            )
            task = TrainingAgent(slurm.restarts_in_allocation, slurm.tasks_per_node)
        try:
            job_id = submit_held(executor, task, self.job, sbatch=begin)
        except Exception as exc:  # sbatch said no
            raise SubmissionRejected(str(exc).strip().splitlines()[-1]) from None
        self.on_submitted(number, job_id)
        return job_id

    def finish_held(self, job_id: str) -> tuple[bool, int | None]:
        """:func:`ffjobs.slurm.held.finish_held` for a job of this run."""
        return finish_held(job_id, self.config.slurm.folder, self.run_key)

    def run_attempt(self, number: int, exclude: tuple[str, ...]) -> AttemptResult:
        from ffjobs.slurm.executor import job_folder

        started = time.time()
        job_id = None
        if self.attach is not None:
            (number, job_id), self.attach = self.attach, None
        if job_id is None:
            try:
                job_id = self.submit(number, exclude)
            except SubmissionRejected as exc:  # a CONFIG failure, not a crash
                return self.rejected(str(exc), started)
        folder = job_folder(self.config.slurm.folder, self.run_key, number)
        status, unconfirmed = self._wait(job_id, folder)
        return self._result(job_id, status, folder, started, unconfirmed)

    def ended(
        self,
        number: int,
        job_id: str,
        status: JobStatus,
        started: float,
        unconfirmed: tuple[str, ...] = (),
    ) -> AttemptResult:
        """Attempt ``number``, job ``job_id``, which a watch saw end with ``status`` (nodes
        ``unconfirmed`` never confirmed it): the result as its logs, checkpoints and accounting
        tell it."""
        from ffjobs.slurm.executor import job_folder

        folder = job_folder(self.config.slurm.folder, self.run_key, number)
        return self._result(job_id, status, folder, started, unconfirmed)

    def attempt_of(self, job_id: str) -> int | None:
        """The attempt ``job_id`` was submitted as, from its submitit folder (None if none)."""
        from ffjobs.slurm.executor import attempt_of

        return attempt_of(self.config.slurm.folder, self.run_key, job_id)

    def rejected(self, reason: str, started: float) -> AttemptResult:
        """An attempt sbatch refused: a failed result whose log is sbatch's message, so the
        classifier calls it a CONFIG failure instead of a crash."""
        message = f"sbatch: error: Batch job submission failed: {reason}"
        return AttemptResult(
            job_id=None, nodes=(), state=JobState.FAILED, exit_code=1,
            ranks=[RankLog(rank=0, node=None, text=message, exit_code=1)],
            started_at=started, ended_at=time.time(),
        )  # fmt: skip

    def _wait(self, job_id: str, folder: Path) -> tuple[JobStatus, tuple[str, ...]]:
        """Poll until the job ends (:class:`~ffjobs.slurm.rank_failures.EndWatch`: a job whose
        rank reported a failure is cancelled); (its status, nodes that never confirmed its end).

        Ctrl-C cancels the job (a person's cancel: the ranks checkpoint and stop, nothing
        requeues it) and waits for its end; a second Ctrl-C stops waiting at once."""
        from submitit.core.utils import JobPaths

        folder = JobPaths(folder, job_id=job_id).folder  # the pattern's %j made this job's
        watch, reports = rank_failures.EndWatch(), []
        while True:
            try:
                status = poll_jobs([job_id])[job_id]
                if not watch.cancelled:
                    reports = (
                        [] if status.is_terminal else rank_failures.current_reports(folder, job_id)
                    )
                    step = watch.before_cancel(status, reports, time.time())
                    if step == "cancel":
                        cancels.cancel(job_id, folder, "ffjobs", _reported(reports), ours=True)
                else:  # accounting says CANCELLED at once; squeue knows who has not ended it yet
                    pending = rank_failures.nodes_still_completing(job_id)
                    step = watch.after_cancel(status, pending, time.time())
                if isinstance(step, rank_failures.Ended):
                    return step.status, step.unconfirmed
                time.sleep(watch.interval(self.poll_s, reports))
            except KeyboardInterrupt:
                if watch.cancelled:
                    raise
                print(
                    f"interrupted: cancelling SLURM job {job_id}; its ranks checkpoint and stop "
                    "(Ctrl-C again to stop waiting for them)",
                    file=sys.stderr,
                    flush=True,
                )
                cancels.cancel(job_id, folder, "Ctrl-C on ffjobs train --submit --wait")
                watch = _Interrupted()

    def _result(
        self,
        job_id: str,
        status: JobStatus,
        folder: Path,
        started: float,
        unconfirmed: tuple[str, ...] = (),
    ):
        """The attempt as the logs, the checkpoints and accounting tell it; earlier runs of the
        same job that SLURM ended on a node failure and requeued become ``requeued`` results."""
        from submitit.core.utils import JobPaths

        from ffjobs.train.checkpoint import open_checkpoints

        cancelled_by, ours = None, False
        if status.state is JobState.CANCELLED:
            note = cancels.read_note(JobPaths(folder, job_id=job_id).folder, job_id)
            ours = note is not None and note.ours
            if not ours:  # a person's cancel: its ranks' last checkpoint and logs first
                _settle(job_id)
                cancelled_by = cancels.who_cancelled(note, cancels.cancelled_by_user(job_id))
        ranks = self._rank_logs(job_id, status.nodes, status.exit_code, folder)
        # every start of the ranks, in order (rank 0's progress record): the first is where the
        # attempt began, later ones are restarts inside the allocation (the fast path) or runs
        # after a requeue
        starts = read_starts(progress_file(JobPaths(folder, job_id=job_id).folder, job_id))
        runs = job_runs(job_id) if status.state is not JobState.UNKNOWN else []
        failed_runs = [r for r in runs[:-1] if r.slurm_state in FAILED_RUN_STATES and r.nodes]
        requeued: list[AttemptResult] = []
        for run in failed_runs:  # each owns the starts before it ended
            mine = [s for s in starts if run.ended_at is None or s.first_step_at <= run.ended_at]
            starts = starts[len(mine) :]
            requeued.append(
                AttemptResult(
                    job_id=job_id,
                    nodes=run.nodes,
                    state=job_state(run.slurm_state),
                    ranks=self._rank_logs(job_id, run.nodes, None, folder),
                    **summary(mine),
                    checkpoint_step=starts[0].start_step if starts else None,
                    started_at=requeued[-1].ended_at if requeued else started,
                    ended_at=run.ended_at or time.time(),
                    slurm_state=run.slurm_state,
                    lost_nodes=unresponsive_nodes(run.nodes),
                )  # fmt: skip
            )
        ref = open_checkpoints(
            self.job.resolved_config(), self.job.checkpoint_dir
        ).latest_verified()
        failed = status.state is not JobState.SUCCEEDED
        return AttemptResult(
            job_id=job_id,
            nodes=tuple(status.nodes),
            state=status.state,
            exit_code=status.exit_code,
            ranks=ranks,
            **summary(starts),
            checkpoint_step=ref.step if ref else None,
            started_at=requeued[-1].ended_at if requeued else started,
            ended_at=time.time(),
            slurm_state=status.slurm_state,
            lost_nodes=(*unconfirmed, *unresponsive_nodes(status.nodes)) if failed else (),
            requeued=tuple(requeued),
            cancelled_by=cancelled_by,
            cancelled_by_us=ours,
        )

    def _rank_logs(self, job_id: str, nodes, exit_code: int | None, folder: Path) -> list[RankLog]:
        """One log per task: a rank, or a node's agent and its ranks (fast path)."""
        from submitit.core.utils import JobPaths

        slurm = self.config.slurm
        per_node = 1 if slurm.restarts_in_allocation else slurm.tasks_per_node
        ranks = []
        for task in range(slurm.nodes * per_node):
            node_index = task // per_node  # SLURM's block distribution
            node = nodes[node_index] if node_index < len(nodes) else None
            paths = JobPaths(folder, job_id=job_id, task_id=task)
            text = _read(paths.stderr) + _read(paths.stdout)
            ranks.append(RankLog(rank=task, node=node, text=text, exit_code=exit_code))
        return ranks


SETTLE_S = 60.0
"""How long, at most, a job a person cancelled is given to end on its nodes (its ranks write
their last checkpoint after SIGTERM, within SLURM's ``KillWait``) before it is read."""


class _Interrupted(rank_failures.EndWatch):
    """The watch of a job Ctrl-C cancelled: it has ended once accounting says so; a second
    Ctrl-C is not caught again."""

    def __init__(self) -> None:
        super().__init__(cancelled_at=time.time())

    def after_cancel(self, status: JobStatus, pending: tuple[str, ...], now: float):
        return rank_failures.Ended(status) if status.is_terminal else "wait"


def _reported(reports: list[dict[str, Any]]) -> str:
    """Why ffjobs cancels a job whose rank reported a failure, in a few words."""
    first = reports[0] if reports else {}
    return f"task {first.get('task', '?')} reported {first.get('error', 'a failure')}"[:200]


def _settle(job_id: str, runner: Runner = run_command) -> None:
    """Wait (at most :data:`SETTLE_S`) until no node is still completing ``job_id``: accounting
    says CANCELLED at once, while the ranks still write the checkpoint they stop at."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        try:
            if not rank_failures.completing_nodes(runner(rank_failures.completing_argv(job_id))):
                return
        except AccountingError:  # squeue no longer knows the job: it has ended everywhere
            return
        time.sleep(0.5)


def run_jobs(run_key: str, runner: Runner = run_command) -> list[str]:
    """Ids of every job SLURM knows under the run's name, oldest first: what a supervisor that
    lost its records (killed right after sbatch) can still find. Accounting keeps the last 30
    days; the controller's queue adds the jobs accounting does not record yet: a held job (every
    job ffjobs submits is held until its folder is complete, :mod:`ffjobs.slurm.held`) reaches
    accounting only once released."""
    argv = ["sacct", "-X", "-n", "-P", "--name", run_key, "-S", "now-30days", "-o", "JobID"]
    found = [line.strip() for line in runner(argv).splitlines()]
    found += [
        line.strip()
        for line in runner(["squeue", "-h", "--name", run_key, "-o", "%i"]).splitlines()
    ]
    unique = dict.fromkeys(job_id for job_id in found if JOB_ID_PATTERN.fullmatch(job_id))
    return sorted(unique, key=submission_order)


def unresponsive_nodes(nodes: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Those of ``nodes`` that ``sinfo`` reports down, failing or not responding (``*``)."""
    import subprocess

    if not nodes:
        return ()
    argv = ["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    lost = []
    for line in out.splitlines():
        node, _, state = line.strip().partition("|")
        state = state.lower()
        if state.endswith("*") or state.startswith(("down", "fail", "drain", "unk")):
            lost.append(node)
    return tuple(dict.fromkeys(lost))


def partition_nodes(partition: str | None) -> list[str] | None:
    """Node names of ``partition`` (the default one if None) per ``sinfo``; None if unknown."""
    import subprocess

    argv = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return sorted(set(out.stdout.split()))


def _read(path: Path) -> str:
    try:
        return path.read_bytes()[-(1 << 20) :].decode(errors="replace")
    except OSError:
        return ""
