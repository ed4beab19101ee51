"""Reading a schema for the command line: the schema at a key, the types it declares, a value
from text."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from operators.config.schema.dialect import MAX_DEPTH, search
from operators.runtime import RegexError


def schema_at(schema: Any, path: Sequence[str]) -> Any:
    """The schema that applies to the value at a key path, as far as `properties`,
    `patternProperties`, `additionalProperties`, `items` and local `$ref`s tell (None when the
    schema does not say)."""
    current = _dereference(schema, schema)
    for segment in path:
        if not isinstance(current, Mapping):
            return None
        properties = current.get("properties")
        patterns = current.get("patternProperties")
        matching = [sub for pattern, sub in patterns.items() if _search(pattern, segment)] \
            if isinstance(patterns, Mapping) else []
        if isinstance(properties, Mapping) and segment in properties:
            current = properties[segment]
        elif isinstance(current.get("items"), Mapping | bool) and segment.isdigit():
            current = current["items"]
        elif matching:
            current = matching[0]
        elif isinstance(current.get("additionalProperties"), Mapping):
            current = current["additionalProperties"]
        else:
            return None
        current = _dereference(current, schema)
    return current


def _dereference(node: Any, root: Any) -> Any:
    """Follow `{"$ref": "#/..."}` JSON pointers within the schema (a few hops; None when broken)."""
    for _ in range(MAX_DEPTH):
        if not (isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#")):
            return node
        target: Any = root
        for part in node["$ref"][1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return None
        node = target
    return None


def _search(pattern: str, text: str) -> bool:
    try:
        return search(pattern, text)
    except RegexError:
        return False


def declared_types(schema: Any) -> list[str]:
    """The `type` names a schema declares (empty when it declares none)."""
    if not isinstance(schema, Mapping):
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    return [t for t in declared if isinstance(t, str)] if isinstance(declared, list) else []


def value_from_text(text: str, schema: Any) -> Any:
    """A command-line value typed as the schema declares: `"2"` is 2 where the schema says integer.

    A string is kept when the schema allows strings or declares no type, and when the text
    reads as none of the declared types (the schema's own check then says what is wrong).
    """
    types = declared_types(schema)
    if not types or "string" in types:
        return text
    lowered = text.strip().lower()
    for name in types:
        if name == "null" and lowered == "null":
            return None
        if name == "boolean" and lowered in ("true", "false"):
            return lowered == "true"
        if name in ("integer", "number", "array", "object"):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if _has_type(value, name):
                return value
    return text


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _has_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return _is_number(value) and float(value).is_integer()
    if name == "number":
        return _is_number(value)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, Mapping)
    return False
