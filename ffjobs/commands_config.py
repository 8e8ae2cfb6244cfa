"""``ffjobs config show``: print the resolved configuration."""

from __future__ import annotations

import argparse

from ffjobs.cli import add_config_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser("config", help="inspect the resolved configuration")
    actions = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print the resolved config (presets and --set applied)")
    add_config_arguments(show)
    show.add_argument("--format", choices=("yaml", "json"), default="yaml")
    show.add_argument(
        "--json", action="store_const", const="json", dest="format", help="same as --format json"
    )
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    from ffjobs.cli import config_from_args

    print(config_from_args(args).dump(args.format), end="" if args.format == "yaml" else "\n")
    return 0
