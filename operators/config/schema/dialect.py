"""The dialect Stead accepts: draft 2020-12's keywords, the limits, the formats it asserts, and
references that never leave the schema."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from fractions import Fraction
from typing import Any

from jsonschema import (  # type: ignore[import-untyped]  # no stubs shipped; types-jsonschema not a dependency
    Draft202012Validator,
    FormatChecker,
    ValidationError,
    validators,
)
from referencing import Registry, Resource

from operators.runtime import RegexError, compile_pattern

DIALECT = "https://json-schema.org/draft/2020-12/schema"
MAX_SCHEMA_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_EXPANDED = 10_000
MAX_NESTING = 4 * MAX_DEPTH  # subschemas within subschemas, through references (the stack the library needs)
MAX_PATTERN = 1000

TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# Where subschemas sit: one schema, a mapping of schemas, a list of schemas; "in place" keywords
# apply their subschemas to the same value (a cycle through them alone never ends).
SCHEMA_KEYWORDS = frozenset({"additionalProperties", "items", "contains", "propertyNames", "not", "if", "then",
                             "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"})
SCHEMA_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
SCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
IN_PLACE = frozenset({"not", "if", "then", "else", "dependentSchemas", "allOf", "anyOf", "oneOf"})
NOT_APPLIED = frozenset({"$defs", "contentSchema"})  # reached through references only, or never
ANNOTATIONS = frozenset({"$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "$comment", "$defs",
                         "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
                         "contentEncoding", "contentMediaType", "contentSchema"})
# the library checks then/else within `if`, minContains/maxContains within `contains`
KEYWORDS = frozenset(Draft202012Validator.VALIDATORS) | {"then", "else", "minContains", "maxContains"} | ANNOTATIONS
DROPPED = {"definitions": "$defs", "dependencies": "dependentRequired or dependentSchemas",
           "$recursiveRef": "$dynamicRef", "$recursiveAnchor": "$dynamicAnchor"}
COUNT_KEYWORDS = frozenset({"minProperties", "maxProperties", "minItems", "maxItems", "minLength", "maxLength",
                            "minContains", "maxContains"})
NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-](\d\d):(\d\d))")
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _is_date_time(instance: object) -> bool:
    """RFC 3339 date-time (jsonschema checks it only with the optional rfc3339-validator)."""
    if not isinstance(instance, str):
        return True
    if not _DATE_TIME.fullmatch(instance):
        return False
    datetime.fromisoformat(instance.upper().replace("Z", "+00:00"))  # ValueError: out of range
    return True


def _is_time(instance: object) -> bool:
    """RFC 3339 full-time: `12:30:00Z`, `12:30:00.5+02:00` (the offset is required)."""
    if not isinstance(instance, str):
        return True
    match = _TIME.fullmatch(instance)
    if match is None:
        return False
    hour, minute, second = (int(g) for g in match.group(1, 2, 3))
    offset_ok = match.group(6) is None or (int(match.group(6)) < 24 and int(match.group(7)) < 60)
    return hour < 24 and minute < 60 and second < 61 and offset_ok


def _is_hostname(instance: object) -> bool:
    """RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens."""
    if not isinstance(instance, str):
        return True
    return 0 < len(instance) <= 253 and all(_LABEL.fullmatch(label) for label in instance.split("."))


def _is_regex(instance: object) -> bool:
    """A pattern RE2 compiles (what `pattern` and `patternProperties` are matched with, below)."""
    if isinstance(instance, str):
        compile_pattern(instance)
    return True


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)  # a copy: never the shared registry
    checker.checks("regex", raises=RegexError)(_is_regex)
    checker.checks("date-time", raises=ValueError)(_is_date_time)
    checker.checks("time")(_is_time)
    checker.checks("hostname")(_is_hostname)
    return checker


FORMAT_CHECKER = _format_checker()
FORMATS = tuple(sorted(FORMAT_CHECKER.checkers))


class ReferenceRefused(LookupError):
    """A `$ref` to something outside the schema: Stead fetches nothing."""


def _refuse(uri: str) -> Resource[Any]:
    raise ReferenceRefused(f"{uri}: only references inside the schema are allowed")


def local_registry() -> Registry[Any]:
    """An empty registry that retrieves nothing (jsonschema adds the bundled meta-schemas)."""
    return Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """`multipleOf` with decimal divisors as their author means them: 0.3 is a multiple of 0.1
    (the library's float arithmetic says it is not; the hand-written validator said it was)."""
    if not validator.is_type(instance, "number") or not validator.is_type(divisor, "number"):
        return
    try:
        ratio = Fraction(str(instance)) / Fraction(str(divisor))
    except (ValueError, ZeroDivisionError):
        return
    if ratio.denominator != 1:
        yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


def search(pattern: str, text: str) -> bool:
    """RE2's search: a tenant's pattern against a tenant's value, in time linear in the value (the
    library's own `re.search` backtracks: `(a+)+$` against 30 characters takes minutes)."""
    return compile_pattern(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """The library's `additionalProperties`, with `patternProperties` matched by RE2."""
    if not validator.is_type(instance, "object"):
        return
    named, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in named and not any(search(p, key) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(key) for key in sorted(extras, key=str))
        if "patternProperties" in schema:  # the library's messages, word for word
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{listed} {verb} not match any of the regexes: "
                                  f"{', '.join(repr(p) for p in sorted(patterns))}")
        else:
            were = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {were} unexpected)")


# Draft 2020-12, but for `multipleOf` (decimal rather than binary fractions) and regular expressions
# (RE2, linear; `unevaluatedProperties` beside `patternProperties`, which the library would match
# with `re`, is refused by `schema_problems`).
Validator = validators.extend(Draft202012Validator, {
    "multipleOf": _multiple_of, "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
})
