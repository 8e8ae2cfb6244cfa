"""A ``submitit.AutoExecutor`` built from the cluster profile (``slurm:`` section of the config).

Job folders are keyed by run and attempt (``<folder>/<run_id>/attempt-<n>/%j``), never by job id
alone: a cluster whose state was wiped restarts its job ids, and a folder keyed only by id would
hand back a stale result of an earlier job.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffjobs.errors import UserError

if TYPE_CHECKING:
    import submitit

    from ffjobs.config import Config
    from ffjobs.config.slurm import SlurmConfig

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def job_folder(base: str | Path, run_id: str, attempt: int) -> Path:
    """submitit's folder pattern for one attempt of one run; ``%j`` becomes the job id."""
    if not _RUN_ID.fullmatch(run_id):
        raise UserError(
            f"run id {run_id!r} must be letters, digits, '.', '_' or '-' (it names a folder "
            f"under {base})")  # fmt: skip
    if attempt < 0:
        raise UserError(f"attempt must be >= 0, got {attempt}")
    return Path(base) / run_id / f"attempt-{attempt}" / "%j"


def attempt_of(base: str | Path, run_id: str, job_id: str) -> int | None:
    """The attempt of run ``run_id`` that ``job_id`` was submitted as, from its submitit folder
    (None if none)."""
    for folder in job_folder(base, run_id, 0).parent.parent.glob(f"attempt-*/{job_id}"):
        number = folder.parent.name.removeprefix("attempt-")
        if number.isdigit():
            return int(number)
    return None


def setup_lines(slurm: SlurmConfig) -> list[str]:
    """Shell lines run before the tasks start: ``export`` of ``slurm.env``, then ``slurm.setup``."""
    exports = [f"export {name}={shlex.quote(value)}" for name, value in slurm.env.items()]
    return exports + list(slurm.setup)


def executor_parameters(slurm: SlurmConfig, name: str) -> dict[str, Any]:
    """Keyword arguments for ``AutoExecutor.update_parameters`` (generic + ``slurm_``/``local_``)."""
    params: dict[str, Any] = {
        "name": name,
        "nodes": slurm.nodes,
        "tasks_per_node": slurm.tasks_per_node,
        "cpus_per_task": slurm.cpus_per_task,
        "mem_gb": slurm.mem_gb,
        "timeout_min": slurm.time_min,
    }
    if slurm.gpus_per_node:  # "--gpus-per-node=0" is rejected by clusters without GPU GRES
        params["gpus_per_node"] = slurm.gpus_per_node
    setup = setup_lines(slurm)
    if slurm.executor == "local":
        if setup:
            params["local_setup"] = setup
        return params
    optional = {
        "slurm_partition": slurm.partition,
        "slurm_account": slurm.account,
        "slurm_qos": slurm.qos,
        "slurm_constraint": slurm.constraint,
        "slurm_exclude": ",".join(slurm.exclude) or None,
        "slurm_setup": setup or None,
    }
    params.update({key: value for key, value in optional.items() if value is not None})
    # one rank that exits abnormally stops the others at once: a job missing a rank can only
    # hang in its next collective, and the failing rank's log is the evidence
    srun_args = ["--kill-on-bad-exit=1", *slurm.srun_args]
    if slurm.container_image:
        srun_args.insert(0, f"--container-image={slurm.container_image}")
    params["slurm_srun_args"] = srun_args
    return params


def make_executor(cfg: Config, *, run_id: str, attempt: int = 0) -> submitit.AutoExecutor:
    """The executor for one attempt of run ``run_id``, shaped by ``cfg.slurm`` and named ``cfg.name``."""
    import submitit

    slurm = cfg.slurm
    if slurm.executor == "local" and slurm.nodes > 1:
        raise UserError(
            f"slurm.nodes: the local executor runs on this machine only (got nodes={slurm.nodes}); "
            "set slurm.nodes=1 or slurm.executor=slurm")  # fmt: skip
    folder = job_folder(slurm.folder, run_id, attempt)
    python = {f"{slurm.executor}_python": slurm.python} if slurm.python else {}
    if slurm.executor == "slurm" and shutil.which("srun") is None:
        raise UserError(
            "slurm.executor=slurm but 'srun' is not on PATH; run from a cluster login node, "
            "start the local cluster (infra/local/up.sh, then source its env.sh) or set "
            "slurm.executor=local")  # fmt: skip
    executor = submitit.AutoExecutor(folder=folder, cluster=slurm.executor, **python)
    executor.update_parameters(**executor_parameters(slurm, name=cfg.name))
    return executor
