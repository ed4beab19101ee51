"""The JSON Schema subset a resource definition may use to constrain its values.

Why a subset written here: the project ships no JSON Schema library, and a resource schema
only needs the structural and value keywords below. What matters more than completeness is
that a schema never *looks* enforced when it is not: `schema_problems` refuses unknown
keywords when the ConfigComponent is applied, so a `$ref` or a `patternProperties` is an
error the author sees, not a constraint that silently does nothing.

Supported: type (a name or a list of names), enum, const, properties, required,
additionalProperties (boolean or schema), minProperties, maxProperties, items (one schema),
minItems, maxItems, uniqueItems, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
multipleOf, minLength, maxLength, pattern, allOf, anyOf, oneOf, not; and the annotations
title, description, default, examples, format, $schema, $id, $comment (not checked).

Messages start with the path of the offending value (`data.nova.debug: ...`), like every
other Stead validation message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from operators.config.keys import type_name

TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "format", "$schema", "$id", "$comment"})
SCHEMA_KEYWORDS = frozenset({"items", "additionalProperties", "not"})
SCHEMA_MAP_KEYWORDS = frozenset({"properties"})
SCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf"})
NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
COUNT_KEYWORDS = frozenset({"minProperties", "maxProperties", "minItems", "maxItems", "minLength", "maxLength"})
OTHER_KEYWORDS = frozenset({"type", "enum", "const", "required", "uniqueItems", "pattern"})
KNOWN = (ANNOTATIONS | SCHEMA_KEYWORDS | SCHEMA_MAP_KEYWORDS | SCHEMA_LIST_KEYWORDS | NUMBER_KEYWORDS
         | COUNT_KEYWORDS | OTHER_KEYWORDS)


def schema_problems(schema: Any, path: str = "schema") -> list[str]:
    """What is wrong with a schema itself: unknown keywords and malformed keyword values."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, Mapping):
        return [f"{path}: a schema is a mapping (or true/false), got a {type_name(schema)}"]
    problems: list[str] = []
    for keyword, value in schema.items():
        where = f"{path}.{keyword}"
        if keyword not in KNOWN:
            problems.append(f"{where}: unsupported keyword (supported: {', '.join(sorted(KNOWN - ANNOTATIONS))})")
        elif keyword in SCHEMA_KEYWORDS:
            problems.extend(schema_problems(value, where))
        elif keyword in SCHEMA_MAP_KEYWORDS:
            if not isinstance(value, Mapping):
                problems.append(f"{where}: must be a mapping of schemas")
            else:
                for name, sub in value.items():
                    problems.extend(schema_problems(sub, f"{where}.{name}"))
        elif keyword in SCHEMA_LIST_KEYWORDS:
            if not isinstance(value, list) or not value:
                problems.append(f"{where}: must be a non-empty list of schemas")
            else:
                for index, sub in enumerate(value):
                    problems.extend(schema_problems(sub, f"{where}[{index}]"))
        elif keyword in NUMBER_KEYWORDS:
            if not _is_number(value) or (keyword == "multipleOf" and value <= 0):
                problems.append(f"{where}: must be a number" + (" above 0" if keyword == "multipleOf" else ""))
        elif keyword in COUNT_KEYWORDS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(f"{where}: must be a non-negative integer")
        elif keyword == "type":
            names = value if isinstance(value, list) else [value]
            bad = [n for n in names if n not in TYPES]
            if bad or not names:
                problems.append(f"{where}: must be one of {', '.join(TYPES)} (or a list of them)")
        elif keyword == "enum" and not isinstance(value, list):
            problems.append(f"{where}: must be a list")
        elif keyword == "required" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problems.append(f"{where}: must be a list of property names")
        elif keyword == "uniqueItems" and not isinstance(value, bool):
            problems.append(f"{where}: must be true or false")
        elif keyword == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError):
                problems.append(f"{where}: not a valid regular expression")
    return problems


def validate(value: Any, schema: Any, path: str = "data") -> list[str]:
    """Every way `value` fails `schema`, each message starting with the value's path."""
    if schema is True or schema is None:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    problems: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_has_type(value, name) for name in names):
            problems.append(f"{path}: expected {' or '.join(names)}, got {type_name(value)}")
            return problems  # the other keywords would only repeat the type error
    if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
        problems.append(f"{path}: must be one of {schema['enum']!r}")
    if "const" in schema and not _equal(value, schema["const"]):
        problems.append(f"{path}: must be {schema['const']!r}")
    if isinstance(value, Mapping):
        problems.extend(_object(value, schema, path))
    elif isinstance(value, list):
        problems.extend(_array(value, schema, path))
    elif isinstance(value, str):
        problems.extend(_string(value, schema, path))
    elif _is_number(value):
        problems.extend(_number(value, schema, path))
    for sub in schema.get("allOf", []):
        problems.extend(validate(value, sub, path))
    if "anyOf" in schema and not any(not validate(value, sub, path) for sub in schema["anyOf"]):
        problems.append(f"{path}: matches none of the anyOf schemas")
    if "oneOf" in schema:
        matches = sum(1 for sub in schema["oneOf"] if not validate(value, sub, path))
        if matches != 1:
            problems.append(f"{path}: must match exactly one of the oneOf schemas, matches {matches}")
    if "not" in schema and not validate(value, schema["not"], path):
        problems.append(f"{path}: must not match the schema under 'not'")
    return problems


def _object(value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            problems.append(f"{path}.{name}: required")
    extra = schema.get("additionalProperties", True)
    for name, sub in value.items():
        where = f"{path}.{name}"
        if name in properties:
            problems.extend(validate(sub, properties[name], where))
        elif extra is False:
            problems.append(f"{where}: not allowed (allowed: {', '.join(properties) or 'none'})")
        elif isinstance(extra, Mapping):
            problems.extend(validate(sub, extra, where))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        problems.append(f"{path}: needs at least {schema['minProperties']} keys")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        problems.append(f"{path}: allows at most {schema['maxProperties']} keys")
    return problems


def _array(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    if "items" in schema:
        for index, item in enumerate(value):
            problems.extend(validate(item, schema["items"], f"{path}[{index}]"))
    if "minItems" in schema and len(value) < schema["minItems"]:
        problems.append(f"{path}: needs at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        problems.append(f"{path}: allows at most {schema['maxItems']} items")
    if schema.get("uniqueItems"):
        for index, item in enumerate(value):
            if any(_equal(item, earlier) for earlier in value[:index]):
                problems.append(f"{path}[{index}]: duplicate item")
    return problems


def _string(value: str, schema: Mapping[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        problems.append(f"{path}: shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        problems.append(f"{path}: longer than {schema['maxLength']} characters")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        problems.append(f"{path}: does not match the pattern {schema['pattern']!r}")
    return problems


def _number(value: float, schema: Mapping[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    if "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: below the minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        problems.append(f"{path}: above the maximum {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        problems.append(f"{path}: must be above {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        problems.append(f"{path}: must be below {schema['exclusiveMaximum']}")
    if "multipleOf" in schema:
        ratio = value / schema["multipleOf"]
        if abs(ratio - round(ratio)) > 1e-9:
            problems.append(f"{path}: not a multiple of {schema['multipleOf']}")
    return problems


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


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: `1 == 1.0`, but `true` is not `1`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def schema_at(schema: Any, path: Sequence[str]) -> Any:
    """The schema that applies to the value at a key path, as far as `properties`,
    `additionalProperties` and `items` tell (None when the schema does not say)."""
    current = schema
    for segment in path:
        if not isinstance(current, Mapping):
            return None
        properties = current.get("properties")
        if isinstance(properties, Mapping) and segment in properties:
            current = properties[segment]
        elif isinstance(current.get("items"), Mapping | bool) and segment.isdigit():
            current = current["items"]
        elif isinstance(current.get("additionalProperties"), Mapping):
            current = current["additionalProperties"]
        else:
            return None
    return current


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
