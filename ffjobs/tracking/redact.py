"""Secrets never reach MLflow: the one place every param, tag and uploaded file passes through.

Two rules:

* a value under a key that looks like a credential (``secret``, ``password``, ``token``, ...,
  case-insensitive, in any part of the dotted key) is replaced by :data:`REDACTED`;
* the values of the AWS credential variables in this process's environment are replaced
  wherever they appear inside any string (a URL with a key in it, a log line, a report).

Only what goes to MLflow is redacted: the run directory's own files (``config.json``, reports)
stay as they are, on the user's disk, next to the credentials the process already had.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REDACTED = "***"

SECRET_KEY = re.compile(
    r"secret|passw(or)?d|passwd|token|credential|access[_-]?key|private[_-]?key|api[_-]?key"
    r"|auth|session[_-]?key|signature",
    re.IGNORECASE,
)
"""Key names whose values are credentials."""

SECRET_ENVIRONMENT = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
"""Environment variables whose values are redacted inside any string."""

TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".txt", ".yaml", ".yml", ".log", ".csv", ".cfg")
"""Uploaded files read as text and redacted; anything else (a PNG) goes as it is."""


def is_secret_key(key: str) -> bool:
    """True when any part of the dotted ``key`` names a credential."""
    return bool(SECRET_KEY.search(key))


def redact_text(text: str) -> str:
    """``text`` with every value of :data:`SECRET_ENVIRONMENT` replaced."""
    for name in SECRET_ENVIRONMENT:
        value = os.environ.get(name)
        if value and len(value) >= 4:  # a 1-3 character value would blank out ordinary text
            text = text.replace(value, REDACTED)
    return text


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
