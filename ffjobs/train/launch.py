"""Local multi-process launch: N ranks on this machine with a loopback rendezvous (torchrun-style).

Each rank is a ``python -m ffjobs.train.worker`` subprocess with ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT`` set. If one rank dies, the launcher kills the
others at once (as ``srun --kill-on-bad-exit`` would): a job missing a rank can only hang.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ffjobs.config import Config
from ffjobs.local_ranks import free_loopback_port, rank_environment


class LaunchFailed(RuntimeError):
    """A rank exited with a non-zero status."""

    def __init__(self, rank: int, returncode: int):
        how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        super().__init__(f"rank {rank} ended with {how}; the other ranks were stopped")
        self.rank, self.returncode = rank, returncode


def launch_local(
    config: Config,
    nproc: int,
    *,
    mode: str = "train",
    data: str = "dataset",
    bench: dict[str, Any] | None = None,
    quiet_stdout: bool = False,
) -> dict[str, Any]:
    """Run ``nproc`` ranks to completion; return rank 0's result.

    ``quiet_stdout`` sends the ranks' console output to stderr (for ``--json`` callers).
    Raises :class:`LaunchFailed` if any rank fails.
    """
    with tempfile.TemporaryDirectory(prefix="ffjobs-launch-") as tmp:
        config_path = Path(tmp) / "config.json"
        config_path.write_text(config.dump("json"))
        result_path = Path(tmp) / "result.json"
        port = free_loopback_port()
        procs = []
        for rank in range(nproc):
            env = rank_environment(rank, nproc, port)
            cmd = [
                sys.executable,
                "-m",
                "ffjobs.train.worker",
                "--config-json",
                str(config_path),
                "--mode",
                mode,
                "--data",
                data,
                "--bench-json",
                json.dumps(bench or {}),
            ]
            if rank == 0:
                cmd += ["--result", str(result_path)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=2 if quiet_stdout else None))
        returncode = _wait_all(procs)
        result = json.loads(result_path.read_text()) if result_path.exists() else {}
        if returncode is not None:
            raise LaunchFailed(*returncode)
        return result


def _wait_all(procs: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Wait for every rank; on the first failure kill the rest. Returns ``(rank, code)`` of it."""
    forwarded = {}

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        with contextlib.suppress(ValueError):  # not the main thread
            forwarded[sig] = signal.signal(sig, forward)
    failure: tuple[int, int] | None = None
    try:
        while True:
            codes = [proc.poll() for proc in procs]
            for rank, code in enumerate(codes):
                # 3 = stopped on request after a checkpoint (every rank agrees on it)
                if code not in (None, 0, 3) and failure is None:
                    failure = (rank, code)
                    for other in procs:
                        if other.poll() is None:
                            other.kill()
            if all(code is not None for code in codes):
                return failure
            time.sleep(0.1)
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        raise
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
