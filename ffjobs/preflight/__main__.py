"""``python -m ffjobs.preflight``: the preflight alone, without loading the other stages' commands."""

from __future__ import annotations

import argparse
import sys

from ffjobs.errors import UserError
from ffjobs.preflight.commands import add_arguments, handle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ffjobs.preflight")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return int(handle(args))
    except UserError as exc:
        print(f"ffjobs: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
