"""``ffjobs airflow up|down|status|trigger``: the embedded Airflow of the working folder.

``up`` starts it (or reuses it), ``down`` stops what ``up`` started, ``status`` says what runs,
``trigger`` starts a DAG run of ``ffjobs_pipeline`` and follows it to its end or to its review.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
from pathlib import Path
from typing import Any

from ffjobs.cli import add_json_argument, print_json
from ffjobs.errors import ExitCode, UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "airflow",
        help="the embedded Airflow: up, down, status, trigger the pipeline",
        description="An Airflow of this working folder (.state/airflow/): SQLite, "
        "LocalExecutor, bound to 127.0.0.1, the simple auth manager with a generated password.",
    )
    actions = parser.add_subparsers(dest="airflow_command", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start it (a running one is reused) and unpause the DAG")
    up.add_argument("--port", type=int, default=None, help="api-server port (default: kept/free)")
    up.set_defaults(handler=_up)
    down = actions.add_parser("down", help="stop what `up` started")
    down.set_defaults(handler=_down)
    status = actions.add_parser("status", help="which components run, the URL and the login")
    add_json_argument(status)
    status.set_defaults(handler=_status)
    run = actions.add_parser(
        "trigger",
        help="trigger ffjobs_pipeline and follow it to its end or its review",
        description="Start a DAG run (a new run each time), print each task's state as it "
        "changes, and stop when the run finishes or waits for review; then print the Airflow "
        "URL and login, the MLflow UI command and how to approve. Exit 1 if the run failed.",
    )
    run.add_argument("--config", "-c", default="local", help="preset (default: local)")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one field for this run (repeatable)",
    )
    run.add_argument(
        "--inject-communicator-failure",
        action="store_true",
        help="fail every rank's gradient all-reduce once, past the first checkpoint: the "
        "train task's retry resumes from that checkpoint",
    )
    run.add_argument(
        "--no-follow", action="store_true", help="print the DAG run's id and return at once"
    )
    run.set_defaults(handler=_trigger)


def _airflow():
    from ffjobs.airflow.embedded import EmbeddedAirflow

    return EmbeddedAirflow(Path.cwd())


def _login_lines(airflow: Any, url: str) -> list[str]:
    from ffjobs.airflow.embedded import USERNAME, passwords_file

    where = passwords_file(airflow.home).relative_to(airflow.workdir)
    return [f"Airflow:  {url}  (user {USERNAME}, password in {where})"]


def _up(args: argparse.Namespace) -> int:
    airflow = _airflow()
    settings = airflow.up(port=args.port)
    print("\n".join(_login_lines(airflow, settings.url)))
    return ExitCode.OK


def _down(args: argparse.Namespace) -> int:
    stopped = _airflow().down()
    print(f"stopped Airflow: {', '.join(stopped)}" if stopped else "Airflow was not running")
    return ExitCode.OK


def _status(args: argparse.Namespace) -> int:
    from ffjobs.airflow.embedded import COMPONENTS

    airflow = _airflow()
    running, settings = airflow.running(), airflow.settings()
    url = settings.url if settings else None
    if args.json:
        print_json({"home": str(airflow.home), "url": url, "running": running})
    else:
        for component in COMPONENTS:
            pid = running.get(component)
            print(f"{component:<14} " + (f"running (pid {pid})" if pid else "stopped"))
        if running and url:
            print("\n".join(_login_lines(airflow, url)))
    return ExitCode.OK if len(running) == len(COMPONENTS) else ExitCode.FAILED


def _trigger(args: argparse.Namespace) -> int:
    from ffjobs.airflow import follow
    from ffjobs.config import load_config

    airflow = _airflow()
    client = airflow.client()
    overrides = list(args.overrides)
    config = load_config(args.config, overrides)  # a bad --set stops here, before a DAG run
    injected_at = None
    if args.inject_communicator_failure:
        injected_at = follow.communicator_failure_step(
            config.train.steps, config.train.checkpoint_every
        )
        overrides.append(f"{follow.COMMUNICATOR_DRILL}={injected_at}")
    conf: dict[str, Any] = {"config": args.config, "overrides": overrides}
    run_id = follow.trigger(client, conf)
    print(f"triggered {follow.DAG_ID}: DAG run {run_id}")
    if injected_at is not None:
        print(f"with one injected communicator failure at training step {injected_at}")
    if args.no_follow:
        return ExitCode.OK
    try:
        followed = follow.follow(client, run_id, echo=print)
    except KeyboardInterrupt:
        print(f"stopped following; DAG run {run_id} goes on in Airflow: {client.url}")
        return ExitCode.INTERRUPTED
    except OSError as exc:  # the api-server went away (ffjobs airflow down, a crash)
        raise UserError(
            f"lost the connection to Airflow at {client.url} while following DAG run {run_id} "
            f"({getattr(exc, 'reason', exc)}); is it running? `ffjobs airflow status`"
        ) from None
    return _report(airflow, client, run_id, followed, injected_at)


def _report(airflow: Any, client: Any, run_id: str, followed: Any, injected_at: int | None) -> int:
    from ffjobs.airflow import follow
    from ffjobs.registry.stage import review_hint
    from ffjobs.runs.run import load_record

    lines: list[str] = []
    run_dir_text = follow.xcom(client, run_id, "validate", "run_dir")
    record, config = None, None
    if run_dir_text:
        run_dir = airflow.workdir / str(run_dir_text)
        record, config = load_record(run_dir)
        lines.append(f"run {record['key']}: {run_dir_text}")
        lines += follow.recovery_lines(follow.read_attempts(run_dir), injected_at)
        lines += [
            f"evaluate: {stage['summary']}"
            for stage in record.get("stages", [])
            if stage.get("name") == "evaluate" and stage.get("summary")
        ]
    if followed.awaiting_review:
        outcome = f"awaiting review ({', '.join(followed.awaiting_review)})"
    else:
        outcome = "finished" if followed.run_state == "success" else followed.run_state.upper()
    failed = [t for t, ti in followed.tasks.items() if ti.get("state") == "failed"]
    lines.insert(
        0, f"DAG run {run_id}: {outcome}" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    took = [
        f"{task} {ti['duration']:.0f} s"
        + (f" (try {ti['try_number']})" if (ti.get("try_number") or 1) > 1 else "")
        for task, ti in followed.tasks.items()
        if ti.get("duration")
    ]
    if took:
        lines.append(f"tasks took: {', '.join(took)}")
    lines += _login_lines(airflow, airflow.settings().url)
    if config is not None:
        uri = config.tracking.tracking_uri
        if not uri.startswith(("http://", "https://")):
            lines.append(f"MLflow:   mlflow ui --backend-store-uri {uri}")
        registered = _registered(record)
        if registered:
            lines += review_hint(registered, config)
    lines += _path_hint(airflow.workdir)
    print("\n".join(lines))
    ok = followed.run_state == "success" or bool(followed.awaiting_review)
    return ExitCode.OK if ok else ExitCode.FAILED


def _path_hint(workdir: Path) -> list[str]:
    """Where the commands printed are, when the shell would not find them (``make demo`` runs
    them from ``.venv/bin`` without activating it)."""
    bin_dir = Path(sys.executable).parent
    if shutil.which("ffjobs") == str(bin_dir / "ffjobs"):
        return []
    with contextlib.suppress(ValueError):
        bin_dir = bin_dir.relative_to(workdir)
    return [f"(the commands are in {bin_dir}: `source {bin_dir}/activate` first)"]


def _registered(record: dict[str, Any]) -> dict[str, Any] | None:
    """The facts of the run's registration, when its model was registered."""
    for stage in reversed(record.get("stages", [])):
        facts = stage.get("facts") or {}
        if stage.get("name") == "register" and {"name", "version", "model_uri"} <= set(facts):
            return {"link": "", **facts}
    return None
