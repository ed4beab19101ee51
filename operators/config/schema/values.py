"""Checking values against a schema, with messages that start with the offending value's path."""

from __future__ import annotations

from typing import Any

from jsonschema import (  # type: ignore[import-untyped]  # no stubs shipped; types-jsonschema not a dependency
    ValidationError,
)
from referencing.exceptions import Unresolvable

from operators.config.keys import type_name
from operators.config.schema.checks import author_order, checked, render_path
from operators.config.schema.dialect import search

# The order of messages about one value: what it is before what it holds.
RANK = {name: rank for rank, name in enumerate([
    None, "type", "enum", "const", "required", "dependentRequired", "additionalProperties", "unevaluatedProperties",
    "propertyNames", "minProperties", "maxProperties", "minItems", "maxItems", "uniqueItems", "contains",
    "unevaluatedItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "not",
])}


def validate(value: Any, schema: Any, path: str = "data") -> list[str]:
    """Every way `value` fails `schema`, each message starting with the value's path.

    A schema with problems (see `schema_problems`) checks nothing here: it was refused when
    its ConfigComponent was applied, and the caller says so.
    """
    problems, validator = checked(schema)
    if validator is None:
        return [f"{path}: cannot be checked, the schema is invalid (schema{problems[0]})"]
    found: list[tuple[tuple[Any, ...], Any, str]] = []
    try:
        for error in validator.iter_errors(value):
            for where, message in _value_messages(error, validator):
                found.append((where, error.validator, message))
    except RecursionError:
        return [f"{path}: cannot be checked, the schema's references nest too deeply for this value"]
    except Unresolvable as error:  # not expected: `schema_problems` resolved every reference
        return [f"{path}: cannot be checked, a reference of the schema does not resolve ({error})"]
    typed = {where for where, keyword, _ in found if keyword == "type"}
    kept = [item for item in found if item[1] == "type" or item[0] not in typed]  # the rest repeats the type error
    kept.sort(key=lambda item: (author_order(value, item[0]), RANK.get(item[1], len(RANK))))
    return list(dict.fromkeys(f"{path}{render_path(where)}: {message}" for where, _, message in kept))


def _value_messages(error: ValidationError, validator: Any) -> list[tuple[tuple[Any, ...], str]]:
    where = tuple(error.absolute_path)
    keyword, expected, instance = error.validator, error.validator_value, error.instance
    if "propertyNames" in error.relative_schema_path:
        return [(where, f"key {instance!r}: {_message(keyword, expected, instance, error, validator)}")]
    if keyword == "required":
        return [((*where, name), "required") for name in expected if name not in instance]
    if keyword == "dependentRequired":
        return [((*where, need), f"required when {name!r} is present")
                for name, needs in expected.items() if name in instance for need in needs if need not in instance]
    if keyword == "additionalProperties":
        properties = list(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        allowed = ", ".join([*properties, *(f"names matching {p!r}" for p in patterns)]) or "none"
        return [((*where, name), f"not allowed (allowed: {allowed})") for name in instance
                if name not in properties and not any(search(p, name) for p in patterns)]
    if keyword == "uniqueItems":
        return [((*where, index), "duplicate item") for index, item in enumerate(instance)
                if any(validator.evolve(schema={"const": earlier}).is_valid(item) for earlier in instance[:index])]
    return [(where, _message(keyword, expected, instance, error, validator))]


def _message(keyword: Any, expected: Any, instance: Any, error: ValidationError,
             validator: Any) -> str:
    if keyword is None:
        return "no value is allowed here"
    if keyword == "type":
        names = expected if isinstance(expected, list) else [expected]
        return f"expected {' or '.join(names)}, got {type_name(instance)}"
    simple = {
        "enum": f"must be one of {expected!r}",
        "const": f"must be {expected!r}",
        "minProperties": f"needs at least {expected} keys",
        "maxProperties": f"allows at most {expected} keys",
        "minItems": f"needs at least {expected} items",
        "maxItems": f"allows at most {expected} items",
        "minLength": f"shorter than {expected} characters",
        "maxLength": f"longer than {expected} characters",
        "pattern": f"does not match the pattern {expected!r}",
        "format": f"not a valid {expected}",
        "minimum": f"below the minimum {expected}",
        "maximum": f"above the maximum {expected}",
        "exclusiveMinimum": f"must be above {expected}",
        "exclusiveMaximum": f"must be below {expected}",
        "multipleOf": f"not a multiple of {expected}",
        "anyOf": "matches none of the anyOf schemas",
        "not": "must not match the schema under 'not'",
    }
    if keyword in simple:
        return simple[keyword]
    if keyword == "oneOf":
        matches = sum(1 for sub in expected if validator.evolve(schema=sub).is_valid(instance))
        return f"must match exactly one of the oneOf schemas, matches {matches}"
    return str(error.message)
