"""``ffjobs runs list`` and ``ffjobs runs show RUN_KEY``: what ran, how it went, where it is.

Above :mod:`ffjobs.runs` (the records) and :mod:`ffjobs.train` (whose checkpoint store says
where a run's training got to), like ``ffjobs run`` (:mod:`ffjobs.pipeline`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ffjobs.cli import add_config_arguments, add_json_argument, config_from_args, print_json
from ffjobs.config import short
from ffjobs.errors import ExitCode
from ffjobs.runs.owner import run_state
from ffjobs.runs.run import RUN_FILE, find_run_dir, load_record


def register(subparsers: argparse._SubParsersAction) -> None:
    runs = subparsers.add_parser("runs", help="list runs and show one (stages, checkpoints)")
    actions = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every run in runs_dir, newest first")
    add_config_arguments(listing)
    add_json_argument(listing)
    listing.set_defaults(handler=_list)
    show = actions.add_parser("show", help="one run: stages, status, latest checkpoint, MLflow")
    add_config_arguments(show)
    add_json_argument(show)
    show.add_argument("run_key", metavar="RUN_KEY")
    show.set_defaults(handler=_show)


def run_summary(run_dir: Path, *, checkpoints: bool = True) -> dict[str, Any]:
    """A run's record, plus its latest verified checkpoint and its MLflow link. ``status`` is
    the run's as it is (``abandoned``: recorded as running, its owner gone), ``state`` the same
    in words, with what it was told by."""
    from ffjobs.tracking.ui_links import run_link

    record, config = load_record(run_dir)
    status, state = run_state(record)
    summary = {
        "key": record["key"],
        "status": status,
        "state": state,
        "owner": record.get("owner"),
        "created": record.get("created"),
        "updated": record.get("updated"),
        "run_dir": str(run_dir),
        "stages": [
            {k: s.get(k) for k in ("name", "status", "seconds", "summary", "facts")}
            for s in record.get("stages", [])
        ],
        "dataset_fingerprint": record.get("dataset_fingerprint"),
        "checkpoint_dir": record.get("checkpoint_dir"),
        "mlflow_run_id": record.get("mlflow_run_id"),
        "mlflow": run_link(config.tracking, record.get("mlflow_run_id")),
        "passes": record.get("passes", 1),
        "resumes": record.get("resumes", []),
    }
    if checkpoints and record.get("checkpoint_dir"):
        summary["latest_checkpoint"] = latest_checkpoint(record["checkpoint_dir"], config)
    return summary


def latest_checkpoint(location: str, config) -> dict[str, Any] | None:
    """The newest complete checkpoint of a run, from its manifests (the data is not read)."""
    import warnings

    from ffjobs.train.checkpoint import open_checkpoints

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a skipped bad checkpoint is not this command's news
            ref = open_checkpoints(config, location).latest()
    except Exception as exc:  # unreachable storage: say so instead of failing the listing
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    return None if ref is None else {"step": ref.step, "location": ref.location}


def _list(args: argparse.Namespace) -> int:
    runs_dir = Path(config_from_args(args).runs_dir)
    rows = []
    for path in sorted(runs_dir.glob(f"*/{RUN_FILE}"), key=_created, reverse=True):
        rows.append(run_summary(path.parent, checkpoints=False))
    if args.json:
        print_json(rows)
        return ExitCode.OK
    if not rows:
        print(f"no runs in {runs_dir}/")
        return ExitCode.OK
    width = max(len(r["key"]) for r in rows)
    for row in rows:
        stages = " ".join(f"{s['name']}:{s['status']}" for s in row["stages"]) or "-"
        print(
            f"{row['key']:<{width}}  {row['status'] or '-':<9} {row['created'] or '-':<25} {stages}"
        )
    return ExitCode.OK


def _show(args: argparse.Namespace) -> int:
    from ffjobs.tracking.mlflow_logger import deliver_pending

    run_dir = find_run_dir(args.run_key, config_from_args(args).runs_dir)
    record, config = load_record(run_dir)
    # records a crashed or cut-off writer left in the run's spool reach MLflow now
    undelivered = deliver_pending(config.tracking, record.get("mlflow_run_id"), run_dir)
    summary = run_summary(run_dir)
    summary["tracking_undelivered"] = undelivered
    if args.json:
        print_json(summary)
        return ExitCode.OK
    print(
        f"run {summary['key']}: {summary['state']}; created {summary['created']}, "
        f"{summary['passes']} pass(es)"
    )
    print(f"  run directory  {summary['run_dir']}")
    for stage in summary["stages"]:
        print(
            f"  [{stage['status']:>7}] {stage['name']:<9} {stage['seconds']:6.1f}s  "
            f"{stage['summary']}"
        )
    latest = summary.get("latest_checkpoint")
    if latest and "error" in latest:
        where = f"unreadable ({latest['error']})"
    elif latest:
        where = f"step {latest['step']} at {latest['location']}"
    else:
        where = "none yet"
    print(f"  checkpoints    {summary['checkpoint_dir']}: latest verified {where}")
    for resume in summary["resumes"]:
        changed = ", ".join(f"{k}={short(v)}" for k, v in resume["overrides"].items())
        step = resume.get("step")
        taken = f"in effect from step {step}" if step is not None else "not trained with yet"
        print(f"  resume         pass {resume['pass']}: {changed} ({taken})")
    print(f"  MLflow         {summary['mlflow'] or 'not tracked'}")
    if undelivered:
        print(f"  tracking       {undelivered} record(s) still undelivered in {run_dir}/tracking")
    return ExitCode.OK


def _created(path: Path) -> str:
    try:
        return json.loads(path.read_text()).get("created") or ""
    except (OSError, json.JSONDecodeError):
        return ""
