"""Run identity: one key names everything of one pipeline run, and one owner holds its MLflow run.

A run key (``<name>-<UTC stamp>-<6 hex>``, or given) names

* the run directory ``<runs_dir>/<key>/``: ``config.json`` (the resolved config it was started
  with, never rewritten), ``run.json`` (this record: status, stages and their facts, MLflow run,
  model shape, dataset fingerprint, and each resume's changes to the config) and each stage's
  reports and logs;
* the checkpoints, ``<train.checkpoint_dir>/<key>/`` (a local or shared path, or ``s3://``);
* the MLflow run (its name, and the tag ``ffjobs.run_key``), the submitit folders and the SLURM
  job name, and the Airflow DAG run's XCom.

The process that creates (or resumes) a run is its *owner*: it starts the MLflow run and ends
it, and the record names it (``owner``; a running run whose owner is gone is shown as
abandoned: :mod:`ffjobs.runs.owner`). Everything else (training ranks, later Airflow tasks)
attaches by the id it is handed and only logs. Stages never write into the config: what a later
stage needs from an earlier one travels in the earlier stage's :class:`StageOutcome` facts,
recorded in ``run.json``.

A resume may change the config, field by field as :mod:`ffjobs.runs.resume_rules` allows: the
changes are recorded in ``run.json`` (``resumes``: pass, time, the changed fields' new values,
and the step training took them up at) and in MLflow (params ``resume.<pass>.<field>``, tag
``ffjobs.resume.<pass>.step``); the run's config is ``config.json`` with every recorded change
applied in order (:func:`load_record`, :func:`resumed_config`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ffjobs.config import Config, config_from_dict, short
from ffjobs.errors import ExitCode, UserError
from ffjobs.private_files import make_private_dir, write_private_text
from ffjobs.runs.owner import found_on_resume, owner_record
from ffjobs.runs.resume_rules import changed_fields, check_changes
from ffjobs.tracking.mlflow_logger import (
    RunLogger,
    deliver_pending,
    end_run,
    environment_tags,
    reopen_run,
    start_run,
    tracking_dir,
)
from ffjobs.tracking.redact import redact_text, remember_config_secrets
from ffjobs.tracking.ui_links import run_link

RUN_FILE = "run.json"
CONFIG_FILE = "config.json"
RUN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass
class StageOutcome:
    """What one stage did: the contract every stage function returns."""

    name: str
    status: str
    """``passed``, ``failed``, ``skipped`` (ran, but had nothing to do: said in ``summary``),
    ``blocked`` (ran, and its check decided against the model: the evaluation gate; a decision,
    not a fault) or ``submitted`` (handed to SLURM without waiting for it)."""
    seconds: float
    summary: str
    exit_code: int = ExitCode.OK
    artifacts: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    """What later stages or an orchestrator need: fingerprint, verdict, report and checkpoint."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": int(self.exit_code)}


def new_run_key(name: str, now: datetime | None = None) -> str:
    """``<name>-<YYYYmmdd-HHMMSS>-<6 hex>``: sortable by time, unique without coordination."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._") or "run"
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{stem[:64]}-{stamp}-{secrets.token_hex(3)}"


def check_run_key(key: str) -> str:
    if not RUN_KEY.fullmatch(key):
        raise UserError(
            f"run key {key!r}: use letters, digits, '.', '_' or '-' (at most 128), starting "
            "with a letter or digit; it names folders and jobs"
        )
    return key


def model_shape(config: Config) -> dict[str, Any]:
    """The model fields a checkpoint's tensors depend on (resuming must keep them)."""
    shape = asdict(config.model)
    for not_shape in ("identity_weights", "losses"):
        shape.pop(not_shape, None)
    return shape


def join_location(base: str, name: str) -> str:
    """``base/name`` for a local path or an ``s3://`` prefix."""
    if base.startswith("s3://"):
        return base.rstrip("/") + "/" + name
    return str(Path(base) / name)


@dataclass
class Run:
    """One pipeline run, as seen by the process holding it."""

    key: str
    dir: Path
    config: Config
    record: dict[str, Any]
    owner: bool = False
    """True in the process that created or resumed the run: it ends the MLflow run."""
    echo: Callable[[str], None] = print
    """Where progress lines go (stderr for ``--json`` callers, a logger in Airflow)."""
    quiet_stdout: bool = False
    """Keep stdout clean for a final JSON document: ranks print to stderr."""
    outcomes: list[StageOutcome] = field(default_factory=list)
    """The stages of this process's pass (the record keeps every pass's latest per stage)."""
    _logger: RunLogger | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # every process holding a run (owner, Airflow task, SLURM job) knows its config's
        # secrets, and every line it prints about the run is redacted on its way out
        remember_config_secrets(self.config)
        self.echo = _redacted(self.echo)

    @property
    def mlflow_run_id(self) -> str | None:
        return self.record.get("mlflow_run_id")

    @property
    def tracking_dir(self) -> Path:
        """Where every writer of this run spools what it logs (``<run dir>/tracking``)."""
        return tracking_dir(self.dir)

    @property
    def logger(self) -> RunLogger:
        """This process's logger into the run's MLflow run (one per process and run id)."""
        if self._logger is None or self._logger.run_id != self.mlflow_run_id:
            self._logger = RunLogger(self.config.tracking, self.mlflow_run_id, self.tracking_dir)
        return self._logger

    def deliver_tracking(self, *, create: bool = False) -> int:
        """Flush this process's logger, then deliver what any writer of the run left in its
        spool; return how many records are still pending. With ``create`` (the process that
        ends the run), an MLflow run that could not be created at the start (the server was
        down) is created first, if the server answers now."""
        if self._logger is not None:
            self._logger.close()
            self._logger = None
        if create and self.mlflow_run_id is None and self.config.tracking.enabled:
            self.record["mlflow_run_id"] = start_run(self.config.tracking, self.key)
            self.save()
        return deliver_pending(self.config.tracking, self.mlflow_run_id, self.dir)

    @property
    def checkpoint_dir(self) -> str:
        """This run's own checkpoint folder: ``<train.checkpoint_dir>/<key>``."""
        return join_location(self.config.train.checkpoint_dir, self.key)

    def outcome(self, stage: str) -> dict[str, Any] | None:
        """``stage``'s latest recorded outcome in this run (status, summary, facts), or None."""
        for outcome in reversed(self.record.get("stages", [])):
            if outcome["name"] == stage:
                return outcome
        return None

    def facts(self, stage: str) -> dict[str, Any]:
        """The facts of ``stage``'s latest outcome in this run (``{}`` if it has not run)."""
        return dict((self.outcome(stage) or {}).get("facts", {}))

    def stage_dir(self, stage: str) -> Path:
        return make_private_dir(self.dir / stage)

    def record_outcome(self, outcome: StageOutcome) -> None:
        self.outcomes.append(outcome)
        stages = [s for s in self.record.get("stages", []) if s["name"] != outcome.name]
        self.record["stages"] = [*stages, outcome.to_dict()]
        start = outcome.facts.get("start_step") if outcome.name == "train" else None
        if start is not None:
            self._resumes_took_effect(int(start))
        self.save()

    def _resumes_took_effect(self, step: int) -> None:
        """The resumes whose changes no training had taken up yet took effect at ``step`` (the
        checkpoint this pass's training resumed from): in the record and as MLflow tags."""
        pending = [r for r in self.record.get("resumes", []) if r.get("step") is None]
        for resume in pending:
            resume["step"] = step
        if pending:
            self.logger.set_tags({f"ffjobs.resume.{r['pass']}.step": str(step) for r in pending})

    def save(self) -> None:
        self.record["updated"] = _now()
        write_private_text(
            self.dir / RUN_FILE, json.dumps(self.record, indent=2, default=str) + "\n"
        )


def create_run(
    config: Config,
    *,
    key: str | None = None,
    echo: Callable[[str], None] = print,
    quiet_stdout: bool = False,
    tags: dict[str, str] | None = None,
) -> Run:
    """Start a new run (this process is its owner): run directory, record, MLflow run."""
    key = check_run_key(key) if key else new_run_key(config.name)
    run_dir = Path(config.runs_dir) / key
    if (run_dir / RUN_FILE).exists():
        raise UserError(f"run {key} already exists in {config.runs_dir}; continue it with --resume")
    try:
        make_private_dir(run_dir)
    except OSError as exc:
        raise UserError(f"runs_dir: cannot create {run_dir}: {exc.strerror}") from None
    write_private_text(run_dir / CONFIG_FILE, config.dump("json") + "\n")
    record: dict[str, Any] = {
        "key": key,
        "name": config.name,
        "created": _now(),
        "status": "running",
        "run_dir": str(run_dir),
        "checkpoint_dir": join_location(config.train.checkpoint_dir, key),
        "model_shape": model_shape(config),
        "dataset_fingerprint": None,
        "tracking_uri": config.tracking.tracking_uri if config.tracking.enabled else None,
        "mlflow_run_id": None,
        "stages": [],
        "passes": 1,
        "owner": owner_record(),
        **({"tags": tags} if tags else {}),
    }
    run = Run(key, run_dir, config, record, owner=True, echo=echo, quiet_stdout=quiet_stdout)
    run.save()
    from ffjobs.runs.description import description_tags
    from ffjobs.tracking.provenance import airflow_dag_run

    mlflow_tags = {
        "ffjobs.run_key": key,
        "ffjobs.run_dir": str(run_dir),
        **description_tags(config, key, airflow_dag_run({}) or None),
        **environment_tags(),
        **(tags or {}),
    }
    _start_tracking(run, mlflow_tags)
    return run


def _start_tracking(run: Run, tags: dict[str, str]) -> None:
    """Create the run's MLflow run and log the resolved config into it. If the server does not
    answer, the tags and params wait in the spool with everything else the run logs."""
    run.record["mlflow_run_id"] = start_run(run.config.tracking, run.key, tags)
    run.save()
    if run.mlflow_run_id is None:
        run.logger.set_tags(tags)
    run.logger.log_params(run.config.to_dict())


def find_run_dir(key: str, runs_dir: str | Path) -> Path:
    check_run_key(key)
    run_dir = Path(runs_dir) / key
    if not (run_dir / RUN_FILE).exists():
        known = sorted(p.name for p in Path(runs_dir).glob(f"*/{RUN_FILE}"))
        hint = f"; known runs: {', '.join(p for p in known[-5:])}" if known else ""
        raise UserError(f"run {key} not found in {runs_dir}/{hint}")
    return run_dir


def resumed_config(key: str, overrides: list[str], preset: str | None = None) -> Config:
    """The config run ``key`` has now (the one it was started with and every resume's changes),
    plus ``overrides``; the run is looked for in the ``runs_dir`` that ``preset`` (default: the
    embedded one) and the overrides give. Whether the overrides may change a resumed run is
    :func:`resume_run`'s to say."""
    from ffjobs.config import load_config

    run_dir = find_run_dir(key, load_config(preset, overrides).runs_dir)
    record, data = _read_run(run_dir)
    return config_from_dict(
        _with_resumes(data, record), source=str(run_dir / CONFIG_FILE), overrides=overrides
    )


def load_record(run_dir: Path) -> tuple[dict[str, Any], Config]:
    """The record and config of the run in ``run_dir``: ``config.json`` (what it was started
    with) with each recorded resume's changes applied."""
    record, data = _read_run(run_dir)
    config = config_from_dict(_with_resumes(data, record), source=str(run_dir / CONFIG_FILE))
    remember_config_secrets(config)  # `ffjobs runs show` prints about a run it does not hold
    return record, config


def _read_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        record = json.loads((run_dir / RUN_FILE).read_text())
        config_data = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{run_dir}: not a readable ffjobs run ({exc})") from None
    return record, config_data


def _with_resumes(data: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a dumped config) with the changes of each resume in ``record``, in order."""
    data = json.loads(json.dumps(data))  # a copy to change
    for resume in record.get("resumes", []):
        for path, value in resume.get("overrides", {}).items():
            *sections, name = path.split(".")
            target = data
            for section in sections:
                target = target.setdefault(section, {})
            target[name] = value
    return data


def attach_run(
    run_dir: str | Path, *, echo: Callable[[str], None] = print, quiet_stdout: bool = False
) -> Run:
    """Hold a run another process owns (a later Airflow task): log into it, never end it."""
    run_dir = Path(run_dir)
    record, config = load_record(run_dir)
    return Run(record["key"], run_dir, config, record, echo=echo, quiet_stdout=quiet_stdout)


def resume_run(
    key: str,
    config: Config,
    *,
    echo: Callable[[str], None] = print,
    quiet_stdout: bool = False,
    latest_step: Callable[[Config, str], int | None] | None = None,
) -> Run:
    """Continue run ``key`` with ``config`` (its own, plus any overrides): same checkpoints,
    same MLflow run; this process becomes the owner again. A run whose owner is gone is said
    so, with the step it continues from when ``latest_step`` is given
    (:func:`ffjobs.train.checkpoint.latest_step`: runs are records, below training, and look
    nothing up in the checkpoint store themselves).

    A field that differs from the run's config either takes effect (recorded as this pass's
    resume: ``run.json``'s ``resumes`` and MLflow params ``resume.<pass>.<field>``) or, as
    :mod:`ffjobs.runs.resume_rules` says, is refused with nothing changed (another model shape,
    seed, batch size, ...). ``config.json`` stays the config the run was started with."""
    run_dir = find_run_dir(key, config.runs_dir)
    record, current = load_record(run_dir)
    changes = changed_fields(current, config)
    check_changes(key, changes)
    found = found_on_resume(key, record, config, latest_step)
    passes = int(record.get("passes", 1)) + 1
    record.update(status="running", passes=passes, owner=owner_record())
    overrides = {path: new for path, (_, new) in changes.items()}
    if overrides:
        resume = {"pass": passes, "at": _now(), "overrides": overrides, "step": None}
        record["resumes"] = [*record.get("resumes", []), resume]
    record["checkpoint_dir"] = join_location(config.train.checkpoint_dir, key)
    run = Run(key, run_dir, config, record, owner=True, echo=echo, quiet_stdout=quiet_stdout)
    run.save()
    if found is not None:
        run.echo(found)
    if run.mlflow_run_id is not None:
        reopen_run(config.tracking, run.mlflow_run_id)
        run.deliver_tracking()  # what an earlier pass could not deliver goes first
        run.logger.set_tags(environment_tags())  # a resume from another DAG run says so
        run.save()
    elif config.tracking.enabled:  # tracking was off or unreachable when the run started
        _start_tracking(run, {"ffjobs.run_key": key, "ffjobs.run_dir": str(run_dir)})
    # params are written once: a pass's number is never used again
    run.logger.log_params({f"resume.{passes}.{path}": new for path, new in overrides.items()})
    if overrides:
        changed = ", ".join(f"{path}={short(new)}" for path, new in overrides.items())
        run.echo(f"run {key} resumed with {changed} (pass {passes})")
    return run


def finish_run(run: Run, status: str, *, end_tracking: bool | None = None) -> None:
    """Record the run's end (``FINISHED`` or ``FAILED``; the record says ``blocked`` for a
    finished run whose latest evaluation the gate blocked) and end its MLflow run.

    Only the owner ends the MLflow run, unless ``end_tracking`` says otherwise: the last
    Airflow task of a DAG run ends it on behalf of the first, which created it. Before it does,
    every spool of the run is delivered (what the server could not take stays spooled, and
    ``ffjobs runs show`` or a resumed pass delivers it later).
    """
    run.record["status"] = {"FINISHED": "passed", "FAILED": "failed"}.get(status, status.lower())
    if status == "FINISHED" and (run.outcome("evaluate") or {}).get("status") == "blocked":
        run.record["status"] = "blocked"  # it ran to its end; its model was not let through
    run.save()
    ending = run.owner if end_tracking is None else end_tracking
    run.deliver_tracking(create=ending)
    if ending:
        end_run(run.config.tracking, run.mlflow_run_id, status)


def check_dataset_fingerprint(run: Run, fingerprint: str) -> None:
    """Record the dataset a run trains on; refuse to continue a run on different data."""
    started = run.record.get("dataset_fingerprint")
    if started and started != fingerprint:
        raise UserError(
            f"run {run.key} was started on dataset fingerprint {started[:12]}, but "
            f"{run.config.data.source} now has {fingerprint[:12]}; the data changed, so start "
            "a new run instead of --resume"
        )
    run.record["dataset_fingerprint"] = fingerprint
    run.save()


def link(run: Run) -> str | None:
    return run_link(run.config.tracking, run.mlflow_run_id)


def _redacted(echo: Callable[[str], None]) -> Callable[[str], None]:
    def say(line: str) -> None:
        echo(redact_text(line))

    return say


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
