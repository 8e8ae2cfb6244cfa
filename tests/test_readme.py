"""The README's commands run as shown.

Every ``ffjobs ...`` line in the README's code blocks is parsed by the real command line (a
misspelt sub-command or option fails here, not in a reader's terminal); the synopsis block's
sub-commands all exist; every ``make`` target it names is in the Makefile; and the transcripts
that need nothing but this checkout (``$ ffjobs ...`` followed by what it prints) are run and
compared line by line. The commands that need a cluster, a trained run or a registered model
are run by the integration tests of their stage; here they are only parsed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ffjobs.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

PLACEHOLDERS = {"RUN_KEY": "local-20261201-103426-02621f", "NAME": "ffjobs-face-swap"}
"""Words the README writes in capitals for the reader to fill in, given a value of their kind."""

RUNNABLE = ("ffjobs config show",)
"""Transcripts (``$ command`` and its output) that need only this checkout: run and compared."""


def code_blocks(text: str) -> list[tuple[int, list[str]]]:
    """``(first line number, lines)`` of each fenced block."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if current is None:
                current, start = [], number + 1
            else:
                blocks.append((start, current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def ffjobs_commands() -> list[tuple[str, str]]:
    """``(where, command)`` for each concrete ``ffjobs`` command in a code block: a line that
    starts with ``ffjobs`` or ``$ ffjobs``, its ``  # comment`` left out. A ``[--flag]`` is
    tried with and without the flag; a synopsis line (``a | b``, ``[--opt VALUE]``, ``...``) is
    left to :func:`test_the_synopsis_names_only_commands_that_exist`."""
    found = []
    for start, lines in code_blocks(README.read_text()):
        for offset, line in enumerate(lines):
            command = re.split(r"\s{2,}#", line.removeprefix("$ "))[0].strip()
            if not command.startswith("ffjobs "):
                continue
            where = f"README.md:{start + offset}"
            flags = re.findall(r"\[(--[\w-]+)\]", command)
            bare = re.sub(r"\s*\[--[\w-]+\]", "", command)
            if re.search(r"[\[|]|\.\.\.", bare):
                continue
            found.append((where, bare))
            if flags:
                found.append((f"{where} with {' '.join(flags)}", f"{bare} {' '.join(flags)}"))
    return found


def _filled(command: str) -> list[str]:
    return [PLACEHOLDERS.get(word, word) for word in shlex.split(command)[1:]]


COMMANDS = ffjobs_commands()


def test_the_readme_shows_ffjobs_commands():
    assert len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_each_command_parses(where, command, capsys):
    try:
        args = build_parser().parse_args(_filled(command))
    except SystemExit as exit_:
        if exit_.code == 0 and ("--help" in command or "--version" in command):
            return
        pytest.fail(f"{where}: `{command}` is refused: {capsys.readouterr().err.strip()}")
    assert getattr(args, "handler", None) is not None, f"{where}: `{command}` names no action"


def test_the_synopsis_names_only_commands_that_exist():
    text = README.read_text()
    synopsis = next(
        lines
        for _, lines in code_blocks(text)
        if any(row.startswith("ffjobs --help") for row in lines)
    )
    actions = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001
    for line in synopsis:
        words = line.split("#")[0].split()
        if len(words) < 2 or words[0] != "ffjobs" or words[1].startswith("-"):
            continue
        assert words[1] in actions, f"synopsis line `{line}`: no sub-command {words[1]!r}"
        sub = actions[words[1]]._subparsers  # noqa: SLF001
        if sub is None:
            continue
        choices = sub._group_actions[0].choices  # noqa: SLF001
        named = [w for w in re.split(r"\s*\|\s*", " ".join(words[2:])) if w]
        for alternative in named:
            action = alternative.split()[0]
            if not action.startswith(("-", "[")) and action.isidentifier():
                assert action in choices, f"synopsis line `{line}`: no action {action!r}"


def test_every_make_target_it_names_exists():
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
    named = set(re.findall(r"^\s*make ([\w-]+)", README.read_text(), re.MULTILINE))
    assert named and named <= targets, (
        f"README names make targets {named - targets} not in Makefile"
    )


def transcripts() -> list[tuple[str, str, list[str]]]:
    """``(where, command, expected output lines)`` of each runnable ``$ command`` transcript."""
    found = []
    for start, lines in code_blocks(README.read_text()):
        for offset, line in enumerate(lines):
            if line.startswith("$ ") and line[2:].startswith(RUNNABLE):
                output = []
                for following in lines[offset + 1 :]:
                    if following.startswith("$ "):
                        break
                    output.append(following)
                found.append((f"README.md:{start + offset}", line[2:], output))
    return found


TRANSCRIPTS = transcripts()


def test_there_are_transcripts_to_run():
    assert TRANSCRIPTS


@pytest.mark.parametrize(
    ("where", "command", "expected"), TRANSCRIPTS, ids=[t[0] for t in TRANSCRIPTS]
)
def test_each_runnable_transcript_prints_what_the_readme_shows(where, command, expected):
    result = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", *shlex.split(command)[1:]],
        capture_output=True,
        text=True,
        timeout=120,  # one process that imports the config module: seconds, even on a busy host
        cwd=REPO,
    )
    printed = (result.stdout + result.stderr).splitlines()
    assert printed == expected, (
        f"{where}: `{command}` printed {printed}, the README shows {expected}"
    )
