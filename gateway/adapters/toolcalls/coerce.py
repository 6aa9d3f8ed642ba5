"""A parameter value the model wrote as plain text, typed by the tool's JSON schema.

Formats that write values as text (Qwen3-Coder's `<parameter=...>` tags) carry no types of
their own; the types come from the schema of the parameter, read as vLLM reads it: `type` (a
name or a list), the types of `enum` values, and those of `anyOf`/`oneOf`/`allOf` branches,
with common aliases (`int`, `float`, `bool`, `dict`, ...). A value is tried against its types
in vLLM's order, null, integer, number, boolean, object, array, string, and stays a string when
none fits. A parameter the schema does not name is a string.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from gateway.adapters.toolcalls.calls import compact_json

_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "char": "string",
    "enum": "string",
    "int": "integer",
    "int32": "integer",
    "int64": "integer",
    "uint": "integer",
    "uint32": "integer",
    "uint64": "integer",
    "long": "integer",
    "short": "integer",
    "unsigned": "integer",
    "float": "number",
    "float32": "number",
    "float64": "number",
    "double": "number",
    "bool": "boolean",
    "dict": "object",
    "arr": "array",
    "list": "array",
    "sequence": "array",
}
_ORDER = ("null", "integer", "number", "boolean", "object", "array", "string")
_ENUM_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _collect(schema: Any, types: set[str]) -> None:
    if not isinstance(schema, Mapping):
        return
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            kind = next((name for cls, name in _ENUM_TYPES if isinstance(value, cls)), "string")
            types.add("null" if value is None else kind)
    for branch in ("anyOf", "oneOf", "allOf"):
        choices = schema.get(branch)
        if isinstance(choices, list):
            for choice in choices:
                _collect(choice, types)


def schema_types(schema: Any) -> frozenset[str]:
    """The JSON types a parameter's schema allows, aliases resolved; a string when it says none."""
    types: set[str] = set()
    _collect(schema, types)
    return frozenset(_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types) or frozenset({"string"})


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _loads(text: str) -> tuple[bool, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False, None
    return _finite(value), value


def coerce(text: str, types: frozenset[str]) -> Any:
    """`text` as the first of `types` it reads as; itself when none fits."""
    for kind in _ORDER:
        if kind not in types:
            continue
        if kind == "string":
            return text
        if kind == "null":
            if text.lower() == "null":
                return None
        elif kind == "integer":
            try:
                return int(text)
            except ValueError:
                pass
        elif kind == "number":
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                return int(number) if number == int(number) else number
        elif kind == "boolean":
            word = text.strip().lower()
            if word in ("true", "1"):
                return True
            if word in ("false", "0"):
                return False
        else:  # object or array
            ok, value = _loads(text)
            if ok:
                return value
    ok, value = _loads(text)
    return value if ok else text


def value_json(text: str, types: frozenset[str]) -> str:
    """The parameter's value as compact JSON."""
    return compact_json(coerce(text, types))
