"""The generic loader: YAML files and ``--set`` overrides into typed dataclasses, with errors
that name file, line and key.

* ``yaml.safe_load`` semantics only (a ``!!python/...`` tag is an error, never executed), except
  that numbers follow YAML 1.2 (``3e-4`` and ``1e6`` are floats, as in ``--set``) and a key
  repeated in one mapping is an error instead of silently keeping the last value;
* unknown keys, wrong types and out-of-range values are errors naming file, line and key path;
* field ranges live in ``field(metadata=...)`` (``ge``, ``gt``, ``le``, ``lt``, ``choices``) and
  cross-field rules in ``__post_init__`` raising ``ValueError``.

Nothing here knows ffjobs' sections: :mod:`ffjobs.config` composes them.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ffjobs.errors import UserError


class ConfigError(UserError, ValueError):
    """A user-fixable configuration mistake; ``str()`` is one line naming where and what."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ):
        self.source, self.key, self.line, self.detail = source, key, line, message
        where = ""
        if source:
            where = source + (f":{line}" if line else "") + ": "
        if key:
            where += f"{_quotable_key(key)}: "
        super().__init__(where + message)


# --------------------------------------------------------------------------- YAML reading


MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (1 MiB): the presets are a few KiB; a bigger file is a mistake or an
attack, and refusing it before reading bounds the time and memory a config can cost."""
MAX_CONFIG_VALUES = 100_000
"""Most nodes a document may hold once its aliases are expanded: later steps (merging, type
checks) walk the expanded data, so a "billion laughs" of nested aliases is refused here."""
ECHO_CHARS = 80
"""Longest key or value an error message quotes: enough to recognise it, never a file's body."""


def short(value: Any) -> str:
    """``repr(value)`` cut to :data:`ECHO_CHARS` (an ellipsis says it was cut), for messages."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[: ECHO_CHARS - 3] + "..."


def _short_text(text: str) -> str:
    """A key or a message fragment cut to :data:`ECHO_CHARS`, unquoted."""
    return text if len(text) <= ECHO_CHARS else text[: ECHO_CHARS - 3] + "..."


_KEY_NAME = re.compile(rf"[A-Za-z0-9_.\[\]-]{{1,{ECHO_CHARS}}}")


def _quotable_key(key: str) -> str:
    """``key`` if it looks like a config key path; else a stand-in, since a key that is not a
    name is a file's content (the first line of a file that is no config parses as one key)."""
    return key if _KEY_NAME.fullmatch(key) else "(a key that is not a config name)"


class _LineTrackingLoader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``3e-4`` and ``1e6`` as numbers."""


# YAML 1.1 (PyYAML) needs a dot and a signed exponent; 1.2 does not. Checked after the 1.1
# rules, so it only adds exponent forms and every other scalar resolves as before.
_LineTrackingLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int, first_line: int):
        super().__init__(key)
        self.key, self.line, self.first_line = key, line, first_line


class _TooBig(Exception):
    """The document expands past :data:`MAX_CONFIG_VALUES` nodes, or its aliases form a cycle."""


def _parse_yaml(text: str, prefix: str = "") -> tuple[Any, dict[str, int]]:
    """Parse YAML text with the loader's rules; return the data and a ``{dotted.key: line}`` index.

    Raises ``yaml.YAMLError`` for bad YAML, :class:`_DuplicateKey` for a key repeated in one
    mapping (PyYAML would silently keep the last one) and :class:`_TooBig` for a document whose
    aliases expand past :data:`MAX_CONFIG_VALUES` nodes. Every step is linear in the document.
    """
    loader = _LineTrackingLoader(text)
    try:
        node = loader.get_single_node()
        _check_expanded_size(node)  # before anything walks the expanded tree
        lines: dict[str, int] = {}
        _index_lines(node, prefix, lines, loader, set())
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, lines


def _check_expanded_size(root: yaml.Node | None) -> None:
    """Raise :class:`_TooBig` if ``root`` expands past :data:`MAX_CONFIG_VALUES` nodes.

    An alias shares its anchor's node, so each node's expanded size is computed once (memoised
    by identity, children before parents, without recursion): linear in the composed nodes.
    """
    if root is None:
        return
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        ident = id(node)
        if children_done:
            on_path.discard(ident)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > MAX_CONFIG_VALUES:
                raise _TooBig(
                    f"expands to more than {MAX_CONFIG_VALUES} values (check its aliases)"
                )
            sizes[ident] = size
            continue
        if ident in sizes:
            continue
        if ident in on_path:
            raise _TooBig("an alias refers to a node that contains it (a recursive alias)")
        on_path.add(ident)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse one YAML file safely; return its mapping and a ``{dotted.key: line}`` index.

    A file over :data:`MAX_CONFIG_BYTES` is refused before it is read; no error quotes more of
    the file than one key and a short value.
    """
    source = str(path)
    try:
        with path.open("rb") as stream:
            # read one byte past the limit: a FIFO or /dev/zero has no honest st_size
            raw = stream.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            size = path.stat().st_size
            what = f"{size} bytes" if size > MAX_CONFIG_BYTES else "larger"
            raise ConfigError(
                f"file is {what}, over the {MAX_CONFIG_BYTES // 1024} KiB limit for a config",
                source=source,
            )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", source=source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read: {exc.strerror or type(exc).__name__}", source=source
        ) from None
    try:
        data, lines = _parse_yaml(text)
    except _DuplicateKey as exc:
        raise ConfigError(
            f"duplicate key (first at line {exc.first_line})",
            source=source,
            key=exc.key,
            line=exc.line,
        ) from None
    except _TooBig as exc:
        raise ConfigError(str(exc), source=source) from None
    except RecursionError:
        raise ConfigError("nested too deeply to be a config", source=source) from None
    except yaml.constructor.ConstructorError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        tag = (exc.problem or "").split("'")[1] if "'" in (exc.problem or "") else "tag"
        raise ConfigError(
            f"unsafe YAML tag {_short_text(tag)} is not allowed; use plain mappings, lists and "
            "scalars",
            source=source,
            line=line,
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"YAML syntax error: {_short_text(problem)}", source=source, line=line
        ) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"top level must be a mapping, got {type(data).__name__}", source=source, line=1
        )
    return data, lines


def _index_lines(
    node: yaml.Node | None,
    prefix: str,
    out: dict[str, int],
    loader: yaml.SafeLoader,
    seen: set[int],
) -> None:
    """Record the line of every mapping key under ``prefix``; raise on a repeated key.

    A node reached again through an alias was checked at its anchor: it is not walked again
    (its keys keep no line of their own under the alias), so the walk is linear.
    """
    if node is None or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, f"{prefix}[{i}]", out, loader, seen)
    if not isinstance(node, yaml.MappingNode):
        return
    first_lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
        if key_node.tag != _MERGE_TAG and isinstance(key_node, yaml.ScalarNode):
            # Compare constructed keys: 'lr' and "lr" are the same key.
            ident = loader.construct_object(key_node)
            if ident in first_lines:
                raise _DuplicateKey(key, line, first_lines[ident])
            first_lines[ident] = line
        out[key] = line
        _index_lines(value_node, key, out, loader, seen)


@dataclass
class Origin:
    """Where each key's value came from, to point errors at the right file and line."""

    sources: dict[str, tuple[str, int | None]] = field(default_factory=dict)

    def record(self, prefix: str, data: Mapping[str, Any], source: str, lines: dict[str, int]):
        for key, value in data.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            self.sources[dotted] = (source, lines.get(dotted))
            if isinstance(value, Mapping):
                self.record(dotted, value, source, lines)

    def of(self, key: str) -> tuple[str | None, int | None]:
        while key:
            if key in self.sources:
                return self.sources[key]
            key = key.rpartition(".")[0]
        return None, None

    def error(self, key: str, message: str) -> ConfigError:
        source, line = self.of(key)
        return ConfigError(message, source=source, key=key, line=line)


def deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe_type(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe_type(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return f"a list of {_describe_type(args[0])}" if args else "a list"
    if origin is dict:
        return "a mapping"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _coerce(value: Any, tp: Any, key: str, origin: Origin) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted where lossless."""
    kind = typing.get_origin(tp)
    bad = origin.error(
        key, f"expected {_describe_type(tp)}, got {short(value)} ({type(value).__name__})"
    )
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise bad
        return build_dataclass(tp, value, key, origin)
    if kind is Literal:
        if value not in typing.get_args(tp):
            raise bad
        return value
    if kind in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, origin)
            except ConfigError:
                continue
        raise bad
    if kind in (list, tuple):
        if not isinstance(value, list | tuple):
            raise bad
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{key}[{i}]", origin) for i, v in enumerate(value)]
        return tuple(items) if kind is tuple else items
    if kind is dict:
        if not isinstance(value, Mapping):
            raise bad
        key_tp, value_tp = typing.get_args(tp) or (Any, Any)
        return {
            _coerce(k, key_tp, key, origin): _coerce(v, value_tp, f"{key}.{k}", origin)
            for k, v in value.items()
        }
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    raise TypeError(f"unsupported config annotation {tp!r} at {key}")


def _check_range(value: Any, meta: Mapping[str, Any], key: str, origin: Origin) -> None:
    if value is None:
        return
    checks = [
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ]
    for name, ok, symbol in checks:
        if name in meta and not ok(value, meta[name]):
            raise origin.error(key, f"must be {symbol} {meta[name]}, got {short(value)}")
    if "choices" in meta and value not in meta["choices"]:
        allowed = ", ".join(repr(c) for c in meta["choices"])
        raise origin.error(key, f"must be one of {allowed}, got {short(value)}")


def build_dataclass(cls: type, data: Mapping[str, Any], prefix: str, origin: Origin) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else str(unknown[0])
        allowed = ", ".join(sorted(fields))
        raise origin.error(key, f"unknown key; allowed here: {allowed}")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        converted = _coerce(value, hints[name], key, origin)
        _check_range(converted, fields[name].metadata, key, origin)
        kwargs[name] = converted
    try:
        return cls(**kwargs)
    except ValueError as exc:
        # __post_init__ cross-field rules: message may start with "field: ..."
        message = str(exc)
        field_name, sep, rest = message.partition(": ")
        if sep and field_name in fields:
            key = f"{prefix}.{field_name}" if prefix else field_name
            raise origin.error(key, rest) from None
        raise origin.error(prefix or "config", message) from None


# --------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``a.b.c=value``; the value is read as a YAML scalar/list (``3e-4``, ``true``, ``[a, b]``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {short(text)} must look like key.path=value", source="--set")
    try:
        value = _parse_yaml(raw, prefix=key)[0] if raw.strip() else ""
    except _DuplicateKey as exc:
        raise ConfigError("duplicate key", source="--set", key=exc.key) from None
    except (_TooBig, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, _TooBig) else "nested too deeply"
        raise ConfigError(f"value {reason}", source="--set", key=key) from None
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_override(
    root: type, data: dict[str, Any], key: str, value: Any, origin: Origin
) -> dict[str, Any]:
    """``data`` with ``key=value`` merged in, once ``key`` is checked against the dataclass
    ``root``'s fields (``--set`` names the key path it could not find)."""
    parts = key.split(".")
    cls: Any = root
    for i, part in enumerate(parts):
        names = {f.name: f for f in dataclasses.fields(cls)}
        if part not in names:
            where = ".".join(parts[:i]) or "top level"
            raise ConfigError(
                f"unknown key (in {where}, allowed: {', '.join(sorted(names))})",
                source="--set",
                key=key,
            )
        hint = typing.get_type_hints(cls)[part]
        if i < len(parts) - 1:
            if not dataclasses.is_dataclass(hint):
                raise ConfigError(
                    f"'{part}' is not a section; cannot set a sub-key", source="--set", key=key
                )
            cls = hint
    nested: Any = value
    for part in reversed(parts):
        nested = {part: nested}
    origin.sources[key] = ("--set", None)
    return deep_merge(data, nested)


# --------------------------------------------------------------------------- public API


def load_dataclass(cls: type, path: Path) -> Any:
    """Load one YAML file (no ``extends``, no overrides) into the dataclass ``cls`` with the
    rules of :func:`load_config`: unknown keys, wrong types, out-of-range values and
    ``__post_init__`` refusals name the file, line and key. An empty file gives ``cls()``."""
    data, lines = read_yaml(path)
    origin = Origin()
    origin.record("", data, str(path), lines)
    return build_dataclass(cls, data, "", origin)
