"""Start training ranks on this machine through the one local launcher (``ffjobs.local_ranks``).

The job (config, checkpoint folder, MLflow run to attach to, data choice) travels to the ranks
as one JSON file; rank 0 writes its result beside it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ffjobs.local_ranks import LaunchFailed, launch_ranks
from ffjobs.train.job import TrainJob

__all__ = ["LaunchFailed", "launch_job", "launch_local"]


def launch_job(
    job: TrainJob, nproc: int, *, log_dir: Path | None = None, quiet_stdout: bool = False
) -> dict[str, Any]:
    """Run ``nproc`` ranks of ``job`` to completion; return rank 0's result.

    Rank logs go to ``log_dir`` (a temporary folder if not given); ``quiet_stdout`` sends
    rank 0's console output to stderr (for ``--json`` callers). Raises :class:`LaunchFailed`
    naming the first rank that failed.
    """
    with tempfile.TemporaryDirectory(prefix="ffjobs-train-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(asdict(job), default=str))
        result_path = Path(tmp) / "result.json"

        def command(rank: int) -> list[str]:
            argv = [sys.executable, "-m", "ffjobs.train.worker", str(job_path)]
            return argv + (["--result", str(result_path)] if rank == 0 else [])

        launch_ranks(
            command,
            nproc,
            log_dir if log_dir is not None else Path(tmp) / "logs",
            console=sys.stderr if quiet_stdout else sys.stdout,
        )
        return json.loads(result_path.read_text()) if result_path.exists() else {}


def launch_local(config, nproc: int, **job_fields: Any) -> dict[str, Any]:
    """``launch_job`` for a config and keyword fields of :class:`TrainJob` (tests, benchmarks);
    ``log_dir`` and ``quiet_stdout`` go to the launcher."""
    launch = {k: job_fields.pop(k) for k in ("log_dir", "quiet_stdout") if k in job_fields}
    return launch_job(TrainJob.of(config, **job_fields), nproc, **launch)
