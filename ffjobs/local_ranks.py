"""The one local launcher: N ranks as processes on this machine with a loopback rendezvous.

Training and preflight both start their ranks here (torchrun-style ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``), under one failure contract: the first rank
that exits abnormally stops the others at once (as ``srun --kill-on-bad-exit`` would: a job
missing a rank can only hang in its next collective), and the error names that rank, how it
ended and its log (and, when its last traceback is a storage error, what storage refused, in
the same line). Every rank's output goes to ``<log_dir>/rank-<N>.log``; rank 0's is also
shown on the console. The ranks are forks of one process that imported what they need once
(:mod:`ffjobs.forked_ranks`); the launcher itself is standard library only and imports no
torch.

The ranks end with the launcher, whatever ends it (:mod:`ffjobs.process_tree`): each is told
who launched it (:data:`~ffjobs.process_tree.LAUNCHER_VAR`) and follows it. SIGTERM (and the
other :data:`FORWARDED_SIGNALS`) is passed on to the ranks, which checkpoint and stop; ranks
still running :data:`STOP_GRACE_S` after a SIGTERM are killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from ffjobs.forked_ranks import FORWARDED_SIGNALS, ForkedRanks
from ffjobs.process_tree import launcher_environment

# Variables that would make a rank believe it is a SLURM/submitit task instead of a local one.
SCHEDULER_VARS = ("SUBMITIT_EXECUTOR", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")

STOPPED_ON_REQUEST = 3
"""Exit status of a rank that checkpointed and stopped on a signal (every rank agrees on it)."""

STOP_GRACE_S = 60.0
"""How long ranks have to checkpoint and stop after a SIGTERM passed on to them (SLURM gives
30 s by default); then they are killed."""


class LaunchFailed(RuntimeError):
    """A rank ended abnormally (the others were stopped), or the ranks ran out of time."""

    def __init__(self, message: str, *, rank: int | None, returncode: int | None, log: Path):
        super().__init__(message)
        self.rank, self.returncode, self.log = rank, returncode, log


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_environment(
    rank: int, nproc: int, port: int, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the variables of local rank ``rank``.

    Scheduler variables are dropped, and each rank gets its share of the cores as threads
    unless OMP_NUM_THREADS is already set: N ranks each starting one thread per core would
    oversubscribe the machine N times.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items()}
    for name in SCHEDULER_VARS:
        env.pop(name, None)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    return env


def launched_rank(environ: Mapping[str, str] | None = None) -> bool:
    """True in a process that an outside launcher (torchrun, srun with several tasks) started
    as one rank of a job: it must run that rank itself instead of starting ranks of its own."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return True
    return "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1


def external_run_key(environ: Mapping[str, str] | None = None) -> str | None:
    """The key all ranks of an outside launch share: torchrun's ``--rdzv-id``, else the SLURM
    job's id; ``None`` when neither names the job."""
    env = os.environ if environ is None else environ
    rdzv = env.get("TORCHELASTIC_RUN_ID")
    if rdzv and rdzv != "none":  # "none" is torchrun's default when --rdzv-id is not given
        return rdzv
    job = env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID")
    return f"slurm-{job}" if job else None


def local_gpu_count() -> int:
    """GPUs this machine exposes, without importing torch (keeps the launcher fast)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def rank_log(log_dir: Path, rank: int) -> Path:
    return log_dir / f"rank-{rank:05d}.log"


def launch_ranks(
    entry: str,
    args: Callable[[int], Sequence[str]],
    nproc: int,
    log_dir: Path,
    *,
    preload: Sequence[str] = (),
    console: IO[str] | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run ``python -m entry *args(rank)`` for ranks ``0..nproc-1`` to completion.

    The ranks are forks of one process that imported the ``preload`` modules once
    (:mod:`ffjobs.forked_ranks`): name there what every rank imports anyway. ``console``
    (default ``sys.stdout``) receives rank 0's output as it comes. Exit statuses 0 and
    :data:`STOPPED_ON_REQUEST` are normal ends. Raises :class:`LaunchFailed` naming the first
    rank that ended otherwise (after stopping the rest) or, past ``timeout_s``, the ranks
    still running.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    console = console if console is not None else sys.stdout
    port = free_loopback_port()
    launcher = launcher_environment()
    envs = [{**rank_environment(r, nproc, port, base=env), **launcher} for r in range(nproc)]
    pipes = [os.pipe() for _ in range(nproc)]
    pumps = [
        threading.Thread(
            target=_pump,
            args=(read_end, rank_log(log_dir, rank), console if rank == 0 else None),
            daemon=True,
        )
        for rank, (read_end, _) in enumerate(pipes)
    ]
    try:
        ranks = ForkedRanks(
            entry, [args(r) for r in range(nproc)], envs, [w for _, w in pipes], preload
        )
    except BaseException:
        for read_end, _ in pipes:
            os.close(read_end)
        raise
    finally:
        for _, write_end in pipes:
            os.close(write_end)
    for pump in pumps:
        pump.start()
    try:
        failure = _wait_all(ranks, nproc, timeout_s)
    finally:
        ranks.kill()  # whatever still runs
        for pump in pumps:
            pump.join(timeout=10)
    if failure is None:
        return
    if isinstance(failure, str):
        raise LaunchFailed(
            f"ranks {failure} and were stopped; see {log_dir}",
            rank=None,
            returncode=None,
            log=rank_log(log_dir, 0),
        )
    rank, code = failure
    log = rank_log(log_dir, rank)
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    others = "; the other ranks were stopped" if nproc > 1 else ""
    tail = _last_lines(log)
    storage = _storage_error(log)
    why = f" on a storage error ({storage})" if storage else ""
    raise LaunchFailed(
        f"rank {rank} ended with {how}{why}{others}; its log: {log}"
        + (f"\n{tail}" if tail else ""),
        rank=rank,
        returncode=code,
        log=log,
    )


def _pump(read_end: int, log: Path, console: IO[str] | None) -> None:
    """Copy one rank's output into its log file (and the console) line by line."""
    with os.fdopen(read_end, "rb") as stream, log.open("wb") as out:
        for line in iter(stream.readline, b""):
            out.write(line)
            out.flush()
            if console is not None:
                with contextlib.suppress(ValueError, OSError):  # console closed under us
                    console.write(line.decode(errors="replace"))
                    console.flush()


def _wait_all(
    ranks: ForkedRanks, nproc: int, timeout_s: float | None
) -> tuple[int, int] | str | None:
    """Wait for every rank; on the first abnormal end kill the rest and return ``(rank, code)``;
    past the deadline, or :data:`STOP_GRACE_S` after a SIGTERM passed on, return why the
    ranks still running must be stopped."""
    stop_asked: list[float] = []
    forwarded = {}

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGTERM and not stop_asked:
            stop_asked.append(time.monotonic())
        ranks.send_signal(signum)

    for sig in FORWARDED_SIGNALS:
        with contextlib.suppress(ValueError):  # not the main thread
            forwarded[sig] = signal.signal(sig, forward)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            ended = ranks.ended()
            for rank, code in ended:  # the first to end abnormally
                if code not in (0, STOPPED_ON_REQUEST):
                    return rank, code
            if len(ended) == nproc:
                return None
            if deadline is not None and time.monotonic() > deadline:
                return f"did not finish within {timeout_s:g} s"
            if stop_asked and time.monotonic() > stop_asked[0] + STOP_GRACE_S:
                return f"did not stop within {STOP_GRACE_S:g} s of SIGTERM"
            time.sleep(0.05)
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)


def _storage_error(log: Path) -> str | None:
    """What storage refused, if the rank's last traceback says so (a full or refused checkpoint
    folder: the folder, the file and its free space); None otherwise."""
    from ffjobs.slurm.failures import MAX_LOG_BYTES, storage_error

    try:
        text = log.read_bytes()[-MAX_LOG_BYTES:].decode(errors="replace")
    except OSError:
        return None
    return storage_error(text)


def _last_lines(log: Path, count: int = 12) -> str:
    """The end of a rank's log (its traceback, usually), indented for an error message."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("  | " + line for line in lines[-count:])
