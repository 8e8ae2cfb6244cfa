"""Print, one per line, the ``uv pip install`` options that make uv install from where pip is
configured to install from: pip's configuration files and ``PIP_*`` variables, as
``python -m pip config list`` shows them. uv reads neither, so without this a machine whose
packages come from a mirror, local wheels or a constraints file would get other packages.

Keys that change where packages come from or which ones are allowed are carried over; pip's
certificate becomes uv's ``SSL_CERT_FILE`` (printed as ``SSL_CERT_FILE=...`` for the caller to
export). Anything else pip is configured with is left out, with a note on stderr."""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip key -> uv option; each takes one value or several, split on white space as pip does
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
FLAGS = {"no-index": "--no-index"}
IGNORED = {"disable-pip-version-check", "default-timeout", "timeout", "progress-bar", "quiet"}


def settings(python: str) -> dict[str, str]:
    """pip's settings, the environment's last (it wins), keyed without their section."""
    listed = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    return parse(listed)


def parse(listed: str) -> dict[str, str]:
    """``pip config list``'s lines (``global.find-links='/wheels'``, ``:env:.cert='...'``)."""
    found: dict[str, str] = {}
    for line in listed.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if section in ("global", "install", ":env:") and key:
            found[key] = shlex.split(value)[0] if value else ""
    return found


def uv_arguments(found: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in found.items():
        if key in OPTIONS:
            for item in value.split():
                args += [OPTIONS[key], item]
        elif key in FLAGS and value.lower() in ("1", "true", "yes", "on"):
            args.append(FLAGS[key])
        elif key == "cert":
            args.append(f"SSL_CERT_FILE={value}")
        elif key not in IGNORED:
            print(f"uv_args_from_pip: pip's setting {key!r} is not passed to uv", file=sys.stderr)
    return args


if __name__ == "__main__":
    print("\n".join(uv_arguments(settings(sys.argv[1]))))
