"""Which strings are secrets: found by their shape in any text, remembered from the resolved
config, and read from this process's environment.

A secret is often seen once with its key (``slurm.env.MY_TOKEN``, ``export
AWS_SECRET_ACCESS_KEY=...``, the password of ``http://user:pw@host``) and later without it (an
error message, a report, an exception's text). So the config loading path hands every resolved
config to :func:`remember_config_secrets`, and the process keeps the values in one set that
:func:`ffjobs.tracking.redact.redact_text` replaces wherever they appear.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any
from urllib.parse import unquote

SECRET_KEY = re.compile(
    r"secret|passw(or)?d|passwd|token|credential|access[_-]?key|private[_-]?key|api[_-]?key"
    r"|auth(?!or)|session[_-]?key|signature|fernet[_-]?key",
    re.IGNORECASE,
)
"""Key names whose values are credentials (``author`` is not one)."""

URL_USERINFO = re.compile(
    r"(?P<scheme>(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#\"'<>]+)@"
)
"""``scheme://userinfo@``: the userinfo runs to the authority's last ``@`` (a raw ``@`` in a
password is common), whatever the scheme (http, s3, postgresql+psycopg, ...)."""

_VALUE = r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"'&|;,]+)"
ASSIGNMENT = re.compile(r"(?<![\w.\-])(?P<name>-{0,2}[A-Za-z_][\w.\-]*)=" + _VALUE)
"""``NAME=value`` or ``--name=value`` (in a setup line, an env map, a URL query, a command)."""
FLAG = re.compile(r"(?<![\w.\-])(?P<name>--[A-Za-z][\w\-]*)[ \t]+" + _VALUE)
"""``--name value``: a command line's flag and its value."""

SHORTEST_SECRET = 4
"""Shorter values are not replaced inside text: a 1-3 character value would blank out
ordinary words and numbers."""
NOT_SECRETS = frozenset({"true", "false", "none", "null", "yes", "no", "***", "changeme"})
"""Values under a credential's name that say nothing secret (a flag, a placeholder)."""

_remembered: set[str] = set()
_environment_seen: tuple[tuple[tuple[str, str], ...], set[str]] = ((), set())
"""The environment :func:`known_secrets` last read, and its secrets (read again on a change)."""
_lock = threading.Lock()


def is_secret_key(key: str) -> bool:
    """True when any part of the dotted ``key`` (or an environment variable name) names a
    credential."""
    return bool(SECRET_KEY.search(key))


def url_passwords(text: str) -> list[str]:
    """The password of every ``user:password@`` URL in ``text`` (a lone user name is not
    remembered: ``git`` or ``user`` would then be blanked out of every text)."""
    passwords = (match.group("userinfo").partition(":")[2] for match in URL_USERINFO.finditer(text))
    return [password for password in passwords if password]


def credential_assignments(text: str) -> list[tuple[re.Match[str], str]]:
    """``(match, value)`` of every assignment to a credential-looking name in ``text``
    (``export AWS_SECRET_ACCESS_KEY=x``, ``TOKEN='x'``, ``--password x``, ``?api_key=x``)."""
    matches = [*ASSIGNMENT.finditer(text), *FLAG.finditer(text)]
    return [
        (match, match.group("value").strip("\"'"))
        for match in matches
        if is_secret_key(match.group("name").lstrip("-"))
    ]


def secrets_in_text(text: str) -> list[str]:
    """Secret values that ``text`` shows with their key: URL passwords and credential
    assignments."""
    values = url_passwords(text) + [value for _, value in credential_assignments(text)]
    return values + [unquote(value) for value in values if unquote(value) != value]


def remember_secret(value: str) -> None:
    """Redact ``value`` wherever it appears, from now on, in this process."""
    if _worth_replacing(value):
        with _lock:
            _remembered.add(value)


def remember_config_secrets(config: Any) -> None:
    """Remember the secrets of a resolved config (a ``Config`` or its dict): values under
    credential keys (``slurm.env.MY_TOKEN``), URL passwords in any field
    (``tracking.tracking_uri``, ``s3.endpoint_url``) and credential assignments in any string
    (``slurm.setup``'s ``export AWS_SECRET_ACCESS_KEY=...``)."""
    data = asdict(config) if is_dataclass(config) and not isinstance(config, type) else config
    for key, value in _strings(data, ""):
        if is_secret_key(key):
            remember_secret(value)
        for secret in secrets_in_text(value):
            remember_secret(secret)


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of ``environ``'s credential variables (``AWS_SECRET_ACCESS_KEY``,
    ``MLFLOW_TRACKING_PASSWORD``, ``*_TOKEN``, ...) and the secrets inside any of its values (a
    database URL with its password)."""
    environ = os.environ if environ is None else environ
    found: set[str] = set()
    for name, value in list(environ.items()):
        if is_secret_key(name):
            found.add(value)
        if "@" in value or "=" in value:  # cheap test first: most values hold neither
            found.update(secrets_in_text(value))
    return {value for value in found if _worth_replacing(value)}


def known_secrets() -> list[str]:
    """Every secret value known now (remembered ones and the environment's), longest first so
    that a secret containing another is replaced whole."""
    global _environment_seen
    environ = tuple(os.environ.items())  # the environment can change (a test, a child's env)
    with _lock:
        if _environment_seen[0] != environ:
            _environment_seen = (environ, environment_secrets(dict(environ)))
        values = _remembered | _environment_seen[1]
    return sorted(values, key=len, reverse=True)


def forget_secrets() -> None:
    """Drop the remembered values (a test's clean slate; the environment's stay)."""
    with _lock:
        _remembered.clear()


def _worth_replacing(value: Any) -> bool:
    return (
        isinstance(value, str)
        and len(value) >= SHORTEST_SECRET
        and value.lower() not in NOT_SECRETS
    )


def _strings(data: Any, key: str) -> Iterator[tuple[str, str]]:
    """``(dotted key, string)`` of every string in a nested document."""
    if isinstance(data, Mapping):
        for name, value in data.items():
            yield from _strings(value, f"{key}.{name}" if key else str(name))
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes)):
        for item in data:
            yield from _strings(item, key)
    elif isinstance(data, str):
        yield key, data
