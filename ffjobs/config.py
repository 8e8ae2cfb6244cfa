"""Typed configuration: dataclasses loaded from YAML, with presets, dotted overrides and clear errors.

One resolved :class:`Config` flows from YAML, the CLI (``--set key=value``) and Airflow Params
into every stage. Each component owns its dataclass (``ffjobs/<component>/config.py``); this
module composes them and owns the loading rules:

* ``yaml.safe_load`` semantics only (a ``!!python/...`` tag is an error, never executed), except
  that numbers follow YAML 1.2 (``3e-4`` and ``1e6`` are floats, as in ``--set``) and a key
  repeated in one mapping is an error instead of silently keeping the last value;
* ``extends: <preset or path>`` at the top of a file merges it over another file (recursively);
* unknown keys, wrong types and out-of-range values are errors naming file, line and key path;
* field ranges live in ``field(metadata=...)`` (``ge``, ``gt``, ``le``, ``lt``, ``choices``) and
  cross-field rules in ``__post_init__`` raising ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ffjobs.data.config import DataConfig
from ffjobs.errors import UserError
from ffjobs.models.config import ModelConfig
from ffjobs.preflight.config import PreflightConfig
from ffjobs.quality.config import EvaluateConfig
from ffjobs.slurm.config import SlurmConfig
from ffjobs.storage_config import S3Config
from ffjobs.tracking.config import RegistryConfig, TrackingConfig
from ffjobs.train.config import TrainConfig

REPO_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
"""The presets in a source checkout (also what an editable install sees)."""
PRESETS_PACKAGE_DIR = "presets"
"""Where a wheel puts ``configs/`` inside the ``ffjobs`` package (``ffjobs.presets``)."""
DEFAULT_PRESET = "local"


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


@dataclass
class Config:
    """The whole resolved configuration of one pipeline run."""

    name: str = "local"
    """Name of the run family: the first part of every run key (``<name>-<stamp>-<random>``)."""
    runs_dir: str = "runs"
    """Where run directories go: ``<runs_dir>/<run key>/`` (config, record, reports, logs)."""
    data: DataConfig = field(default_factory=DataConfig)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    s3: S3Config = field(default_factory=S3Config)
    """The S3-compatible store behind ``s3://`` datasets and checkpoints."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def dump(self, fmt: Literal["yaml", "json"] = "yaml") -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, sort_keys=False)
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


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


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
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


def embedded_preset_dirs() -> list[Path]:
    """The presets that ship with ffjobs: the installed package's, else the source tree's."""
    dirs = []
    packaged = importlib.resources.files("ffjobs") / PRESETS_PACKAGE_DIR
    if isinstance(packaged, Path) and packaged.is_dir():  # a zipped install has no real path
        dirs.append(packaged)
    if REPO_CONFIG_DIR.is_dir():
        dirs.append(REPO_CONFIG_DIR)
    return dirs


def resolve_preset(name_or_path: str | Path, relative_to: Path | None = None) -> Path:
    """Find a config file: an existing path, else ``<name>.yaml`` in ``./configs``, then in the
    presets that ship with ffjobs (:func:`embedded_preset_dirs`)."""
    candidate = Path(name_or_path)
    if relative_to is not None and not candidate.is_absolute():
        beside = relative_to.parent / candidate
        if beside.exists() or beside.with_suffix(".yaml").exists():
            candidate = beside
    if candidate.exists():
        return candidate
    if candidate.suffix == "" and candidate.with_suffix(".yaml").exists():
        return candidate.with_suffix(".yaml")
    for directory in (Path.cwd() / "configs", *embedded_preset_dirs()):
        for stem in (str(name_or_path), f"clusters/{name_or_path}"):
            found = directory / f"{stem}.yaml"
            if found.exists():
                return found
    return candidate  # reading it reports "file not found" with the path the user gave


def _load_layers(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[str, dict, dict]]:
    """Return ``[(source, data, lines), ...]`` from the most basic preset to ``path``."""
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(str(p) for p in (*seen, resolved))
        raise ConfigError(f"'extends' forms a cycle: {chain}", source=str(path), key="extends")
    data, lines = _read_yaml(path)
    parent = data.pop("extends", None)
    layers: list[tuple[str, dict, dict]] = []
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError(
                "must be a preset name or a path (string)",
                source=str(path),
                key="extends",
                line=lines.get("extends"),
            )
        parent_path = resolve_preset(parent, relative_to=path)
        if not parent_path.exists():
            raise ConfigError(
                f"preset {short(parent)} not found (looked beside this file and in configs/)",
                source=str(path),
                key="extends",
                line=lines.get("extends"),
            )
        layers = _load_layers(parent_path, (*seen, resolved))
    layers.append((str(path), data, lines))
    return layers


# --------------------------------------------------------------------------- building dataclasses


@dataclass
class _Origin:
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


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
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


def _coerce(value: Any, tp: Any, key: str, origin: _Origin) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted where lossless."""
    kind = typing.get_origin(tp)
    bad = origin.error(
        key, f"expected {_describe_type(tp)}, got {short(value)} ({type(value).__name__})"
    )
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise bad
        return _build(tp, value, key, origin)
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


def _check_range(value: Any, meta: Mapping[str, Any], key: str, origin: _Origin) -> None:
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


def _build(cls: type, data: Mapping[str, Any], prefix: str, origin: _Origin) -> Any:
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


def _apply_override(data: dict[str, Any], key: str, value: Any, origin: _Origin) -> dict[str, Any]:
    parts = key.split(".")
    cls: Any = Config
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
    return _deep_merge(data, nested)


# --------------------------------------------------------------------------- public API


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> Config:
    """Load a preset name or YAML path, then apply ``--set`` overrides.

    ``None`` means the embedded default, ``configs/local.yaml`` as shipped with ffjobs (never a
    ``local.yaml`` of the working directory).
    """
    origin = _Origin()
    data: dict[str, Any] = {}
    if path is None:
        path = _embedded_default()
    for source, layer, lines in _load_layers(resolve_preset(path)):
        origin.record("", layer, source, lines)
        data = _deep_merge(data, layer)
    for text in overrides:
        key, value = parse_override(text)
        data = _apply_override(data, key, value, origin)
    return _build(Config, data, "", origin)


def load_dataclass(cls: type, path: Path) -> Any:
    """Load one YAML file (no ``extends``, no overrides) into the dataclass ``cls`` with the
    rules of :func:`load_config`: unknown keys, wrong types, out-of-range values and
    ``__post_init__`` refusals name the file, line and key. An empty file gives ``cls()``."""
    data, lines = _read_yaml(path)
    origin = _Origin()
    origin.record("", data, str(path), lines)
    return _build(cls, data, "", origin)


def _embedded_default() -> Path:
    for directory in embedded_preset_dirs():
        if (directory / f"{DEFAULT_PRESET}.yaml").is_file():
            return directory / f"{DEFAULT_PRESET}.yaml"
    raise ConfigError(
        "the embedded default preset is missing from this installation; reinstall ffjobs",
        source=f"{PRESETS_PACKAGE_DIR}/{DEFAULT_PRESET}.yaml",
    )


def config_from_dict(
    data: Mapping[str, Any], source: str = "<dict>", overrides: Iterable[str] = ()
) -> Config:
    """Build a config from a plain mapping (a dumped config, Airflow Params, a run's params),
    then apply ``--set`` overrides as :func:`load_config` does."""
    origin = _Origin()
    origin.record("", data, source, {})
    merged = dict(data)
    for text in overrides:
        key, value = parse_override(text)
        merged = _apply_override(merged, key, value, origin)
    return _build(Config, merged, "", origin)


# --------------------------------------------------------------------------- JSON schema

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_BOUND_KEYWORDS = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
}


def param_schema(key: str, *, nullable: bool = False) -> dict[str, Any]:
    """JSON-schema keywords for the config field at dotted ``key`` (e.g. an Airflow ``Param``).

    The type comes from the annotation, bounds from ``metadata`` (``ge`` -> ``minimum``, ``gt`` ->
    ``exclusiveMinimum``, ``le`` -> ``maximum``, ``lt`` -> ``exclusiveMaximum``) and ``enum``
    from a ``Literal`` or ``metadata["choices"]``. ``nullable`` also admits ``null`` (a Param
    left empty keeps the preset's value). An unknown key raises ``KeyError``.
    """
    cls: Any = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = (
            {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        )
        if part not in fields:
            raise KeyError(f"no config field {'.'.join(parts[: i + 1])!r}")
        found, cls = fields[part], typing.get_type_hints(cls)[part]
    json_types, enum = _json_types(cls)
    if nullable or "null" in json_types:
        json_types = ["null", *(t for t in json_types if t != "null")]
    schema: dict[str, Any] = {"type": json_types[0] if len(json_types) == 1 else json_types}
    enum = enum or list(found.metadata.get("choices", ())) or None
    if enum is not None:
        schema["enum"] = [None, *enum] if "null" in json_types and None not in enum else enum
    for name, keyword in _BOUND_KEYWORDS.items():
        if name in found.metadata:
            schema[keyword] = found.metadata[name]
    return schema


def _json_types(tp: Any) -> tuple[list[str], list[Any] | None]:
    """The JSON types of annotation ``tp`` and, for a ``Literal``, its values."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        values = list(typing.get_args(tp))
        return list(dict.fromkeys(_JSON_TYPES[type(v)] for v in values)), values
    if origin in (typing.Union, types.UnionType):
        names: list[str] = []
        enum: list[Any] | None = None
        for arg in typing.get_args(tp):
            arg_types, arg_enum = _json_types(arg)
            names += [t for t in arg_types if t not in names]
            enum = arg_enum if arg_enum is not None else enum
        return names, enum
    if tp is type(None):
        return ["null"], None
    if origin in (list, tuple):
        return ["array"], None
    if origin is dict or dataclasses.is_dataclass(tp):
        return ["object"], None
    if tp in _JSON_TYPES:
        return [_JSON_TYPES[tp]], None
    raise TypeError(f"no JSON type for config annotation {tp!r}")
