"""The ``ffjobs`` command line: one sub-command per stage, human output by default, ``--json`` for machines.

Each component registers its own sub-commands (``ffjobs/<component>/commands.py`` exposing
``register(subparsers)``), so this file only knows the shared options and the exit-code rules.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from ffjobs import __version__
from ffjobs.errors import ExitCode, UserError
from ffjobs.tracking.redact import redact_text, remember_config_secrets

# Modules that add sub-commands; each exposes ``register(subparsers) -> None``.
COMMAND_MODULES = (
    "ffjobs.data.commands",
    "ffjobs.preflight.commands",
    "ffjobs.models.commands",
    "ffjobs.train.commands",
    "ffjobs.evaluate.commands",
    "ffjobs.bench.commands",
    "ffjobs.pipeline",
    "ffjobs.commands_runs",
    "ffjobs.registry.commands",
    "ffjobs.airflow.commands",
)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--set``: shared by every command that reads the resolved config."""
    parser.add_argument(
        "--config",
        "-c",
        default=None,
        metavar="PRESET|PATH",
        help="preset name (configs/<name>.yaml) or YAML path; default: the built-in local profile",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one field, e.g. --set train.lr=2e-4 (repeatable)",
    )


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_nproc_argument(parser: argparse.ArgumentParser) -> None:
    """``--nproc N``: ranks on this machine, a shorthand for ``--set slurm.tasks_per_node=N``."""
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="ranks to start on this machine (sets slurm.tasks_per_node; default: the config's)",
    )


def overrides_from_args(args: argparse.Namespace) -> list[str]:
    """``--set`` strings, plus what shorthand options such as ``--nproc`` stand for."""
    overrides = list(args.overrides)
    nproc = getattr(args, "nproc", None)
    if nproc is not None:
        if nproc < 1:
            raise UserError(f"--nproc: must be >= 1, got {nproc}")
        overrides.append(f"slurm.tasks_per_node={nproc}")
    return overrides


def config_from_args(args: argparse.Namespace):
    """The resolved config of ``--config`` and ``--set``; its secrets are redacted from
    everything the command prints from now on."""
    from ffjobs.config import load_config

    config = load_config(args.config, overrides_from_args(args))
    remember_config_secrets(config)
    return config


def print_json(obj: Any) -> None:
    # one write: the redaction of stdout sees each value whole, not in the encoder's pieces
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


class RedactingStream:
    """A text stream whose writes are redacted first (:func:`ffjobs.tracking.redact.redact_text`);
    everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(redact_text(text))

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def redacted_terminal() -> Iterator[None]:
    """Redact everything this process prints on stdout and stderr (links, errors, warnings):
    a secret of the config or the environment never reaches a terminal or a CI log."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ffjobs",
        description="Face-fusion training on SLURM: validate data, preflight the fabric, "
        "train with DDP.",
    )
    parser.add_argument("--version", action="version", version=f"ffjobs {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_config_show(subparsers)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _register_config_show(subparsers: argparse._SubParsersAction) -> None:
    """``ffjobs config show``: the resolved configuration (presets and ``--set`` applied)."""
    config = subparsers.add_parser("config", help="inspect the resolved configuration")
    actions = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print the resolved config (presets and --set applied)")
    add_config_arguments(show)
    show.add_argument("--format", choices=("yaml", "json"), default="yaml")
    show.add_argument(
        "--json", action="store_const", const="json", dest="format", help="same as --format json"
    )
    show.set_defaults(handler=_config_show)


def _config_show(args: argparse.Namespace) -> int:
    print(config_from_args(args).dump(args.format), end="" if args.format == "yaml" else "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    with redacted_terminal():
        parser = build_parser()
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return ExitCode.USAGE
        try:
            return int(handler(args) or ExitCode.OK)
        except UserError as exc:
            print(f"ffjobs: error: {exc}", file=sys.stderr)
            return int(exc.exit_code)
        except KeyboardInterrupt:
            print("ffjobs: interrupted", file=sys.stderr)
            return ExitCode.INTERRUPTED
        except Exception:  # a bug: its traceback, through the redacted stderr
            traceback.print_exc()
            return ExitCode.FAILED


if __name__ == "__main__":
    sys.exit(main())
