"""Secrets never leave the process: the one place every param, tag, uploaded file, printed
line, log line and XCom value passes through.

Rules, applied in this order to any text (:func:`redact_text`):

* the userinfo of any URL: ``scheme://user:password@host`` becomes ``scheme://user:***@host``,
  ``scheme://token@host`` becomes ``scheme://***@host``;
* the value of an assignment to a credential-looking name: ``export AWS_SECRET_ACCESS_KEY=x``,
  ``TOKEN='x'``, ``--password x``, ``?api_key=x``;
* every secret value known to the process (:mod:`ffjobs.tracking.known_secrets`: remembered from
  the resolved config, and the environment's credential variables), wherever it appears.

Documents (params, tags, JSON) also lose the value under any credential-looking key
(:func:`redact_value`). The run directory's own files (``config.json``, reports) keep what the
user wrote; the run directory is readable by its owner only (:mod:`ffjobs.private_files`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ffjobs.tracking.known_secrets import (
    SECRET_KEY,
    URL_USERINFO,
    credential_assignments,
    is_secret_key,
    known_secrets,
    remember_config_secrets,
    remember_secret,
)

__all__ = [
    "REDACTED",
    "SECRET_KEY",
    "is_secret_key",
    "redact_document",
    "redact_mapping",
    "redact_text",
    "redact_value",
    "redacted_copy",
    "remember_config_secrets",
    "remember_secret",
]

REDACTED = "***"

TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".txt", ".yaml", ".yml", ".log", ".csv", ".cfg")
"""Uploaded files read as text and redacted; anything else (a PNG) goes as it is."""


def redact_text(text: str) -> str:
    """``text`` with URL userinfo, credential assignments and every known secret value
    replaced by :data:`REDACTED`."""
    if not text:
        return text
    text = URL_USERINFO.sub(_redact_userinfo, text)
    spans = sorted((match.span("value") for match, _ in credential_assignments(text)), reverse=True)
    kept_from = len(text)
    for start, end in spans:  # from the end, so earlier spans keep their offsets
        if end <= kept_from:  # a flag's value that is also an assignment is replaced once
            text, kept_from = text[:start] + REDACTED + text[end:], start
    secrets = known_secrets()
    if secrets:
        text = _any_of(tuple(secrets)).sub(REDACTED, text)
    return text


@functools.lru_cache(maxsize=8)
def _any_of(values: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, values)))


def _redact_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match.group("userinfo").partition(":")
    userinfo = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{match.group('scheme')}{userinfo}@"


def redact_value(key: str, value: Any) -> str:
    """The string MLflow gets for ``key``'s ``value``."""
    if is_secret_key(key) and value not in (None, ""):
        return REDACTED
    return redact_text(str(value))


def redact_mapping(values: Mapping[str, Any]) -> dict[str, str]:
    """Params or tags as MLflow gets them: every value a redacted string."""
    return {key: redact_value(key, value) for key, value in values.items()}


def redact_document(data: Any, key: str = "") -> Any:
    """A JSON document with secret keys' values and environment secrets redacted."""
    if isinstance(data, Mapping):
        return {k: redact_document(v, f"{key}.{k}" if key else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_document(item, key) for item in data]
    if is_secret_key(key) and data not in (None, ""):
        return REDACTED
    return redact_text(data) if isinstance(data, str) else data


def redacted_copy(path: Path, out_dir: Path) -> Path:
    """The file to upload for ``path``: a redacted copy in ``out_dir`` for text files (JSON by
    its keys too), the file itself otherwise."""
    path = Path(path)
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return path
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix.lower() == ".json":
        try:
            text = json.dumps(redact_document(json.loads(text)), indent=2) + "\n"
        except json.JSONDecodeError:
            text = redact_text(text)
    else:
        text = _redact_key_value_lines(redact_text(text))
    out = Path(out_dir) / path.name
    out.write_text(text, encoding="utf-8")
    return out


_KEY_VALUE = re.compile(r"^(\s*[-\w.]+\s*[:=]\s*)(\S.*)$")


def _redact_key_value_lines(text: str) -> str:
    """``password: x`` / ``token=x`` lines of a YAML, env or log file lose their value."""
    lines = []
    for line in text.splitlines(keepends=True):
        match = _KEY_VALUE.match(line)
        if match and is_secret_key(match.group(1)):
            ending = "\n" if line.endswith("\n") else ""
            line = match.group(1) + REDACTED + ending
        lines.append(line)
    return "".join(lines)
