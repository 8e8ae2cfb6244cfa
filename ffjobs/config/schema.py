"""JSON-schema keywords for config fields (the Airflow trigger form's Params and the REST
check), from the dataclasses' annotations and ``field(metadata=...)``."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from ffjobs.config import Config

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
