"""Start a training job's ranks on this machine: :func:`launch_job` writes the job to a file,
starts ``nproc`` ranks of :mod:`ffjobs.train.worker` through the one local launcher
(:mod:`ffjobs.local_ranks`) and returns rank 0's result.

The launcher imports no torch: the process that starts the ranks (the CLI, an Airflow task)
only writes a file and waits, and the ranks share one import of what they need
(:data:`RANK_IMPORTS`, made once in the process they are forked from).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ffjobs.local_ranks import launch_ranks
from ffjobs.train.job import TrainJob

RANK_IMPORTS = (
    "ffjobs.train.trainer",
    "ffjobs.train.probe",
    "ffjobs.models.flops",
    "ffjobs.tracking.system_metrics",
    "torch._dynamo",  # with Inductor, imported by the first optimizer step
    "torch._inductor",
    "torch.distributed.algorithms.ddp_comm_hooks",  # imported by DDP's constructor
)
"""What every training rank imports: the launch's ranks share one import of it
(:func:`~ffjobs.local_ranks.launch_ranks`)."""


def launch_job(
    job: TrainJob,
    nproc: int,
    *,
    log_dir: Path | None = None,
    quiet_stdout: bool = False,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``nproc`` ranks of ``job`` to completion; return rank 0's result.

    Rank logs go to ``log_dir`` (a temporary folder if not given); ``quiet_stdout`` sends
    rank 0's console output to stderr (for ``--json`` callers); ``env`` is the ranks' base
    environment (default: this process's). Raises :class:`LaunchFailed` naming the first rank
    that failed.
    """
    with tempfile.TemporaryDirectory(prefix="ffjobs-train-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(asdict(job), default=str))
        result_path = Path(tmp) / "result.json"

        def args(rank: int) -> list[str]:
            return [str(job_path)] + (["--result", str(result_path)] if rank == 0 else [])

        launch_ranks(
            "ffjobs.train.worker",
            args,
            nproc,
            log_dir if log_dir is not None else Path(tmp) / "logs",
            preload=RANK_IMPORTS,
            console=sys.stderr if quiet_stdout else sys.stdout,
            env=env,
        )
        return json.loads(result_path.read_text()) if result_path.exists() else {}


def launch_local(config, nproc: int, **job_fields: Any) -> dict[str, Any]:
    """``launch_job`` for a config and keyword fields of :class:`TrainJob` (tests, benchmarks);
    ``log_dir``, ``quiet_stdout`` and ``env`` go to the launcher."""
    launch = {k: job_fields.pop(k) for k in ("log_dir", "quiet_stdout", "env") if k in job_fields}
    return launch_job(TrainJob.of(config, **job_fields), nproc, **launch)
