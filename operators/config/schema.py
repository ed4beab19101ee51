"""JSON Schema (draft 2020-12) for the values of a resource, checked with the `jsonschema` library.

Why `jsonschema`: resource schemas are written by tenants who know JSON Schema, and a
hand-written subset kept refusing what they reach for (`$ref` and `$defs`, `patternProperties`,
`if`/`then`/`else`, formats...). The maintained library implements the whole of draft 2020-12,
follows the official test suite, and validates schemas against the draft's own meta-schema.
Draft 2020-12 is the only dialect: a `$schema` naming another draft is refused rather than
honoured differently from what its author expects.

What Stead adds around the library, when a ConfigComponent is applied (`schema_problems`), so
that a schema never *looks* enforced when it is not and never costs more than a bounded effort:

- the schema must satisfy the 2020-12 meta-schema; messages name the path inside the schema
  (`schema.properties.port.minimum: must be a number`);
- unknown keywords are refused (a typo such as `minimun` would otherwise be a silent
  annotation), and so are the keywords draft 2020-12 dropped (`definitions`, `dependencies`,
  `$recursiveRef`, `$recursiveAnchor`);
- a `format` must be one Stead checks (`FORMATS`): formats are *asserted*, not annotations
  (the library's checkers, plus date-time, time and hostname written here: the library checks
  those only with optional packages Stead does not install);
- `$ref` and `$dynamicRef` resolve inside the schema only (JSON pointers, anchors, embedded
  `$id`s). Schemas come from tenants: the registry's `retrieve` refuses every other URI, so an
  `http://...`, `file:///...` or unknown URN reference is an error at apply time and nothing is
  ever fetched from the network or the filesystem;
- the work is bounded: at most `MAX_SCHEMA_BYTES` serialized, `MAX_DEPTH` levels of nesting,
  and, once references are expanded, `MAX_EXPANDED` subschemas (a chain of `anyOf` over
  `$ref`s would otherwise make a small schema exponential) nested at most `MAX_NESTING` deep
  (a long chain of `$ref`s would otherwise exhaust the stack); no reference cycle that does
  not descend into the value (`{"$ref": "#"}` alone);
- `pattern` and `patternProperties` run Python `re` (the library's choice), which has no
  timeout and can backtrack catastrophically on patterns such as `(a+)+$`: a write is only as
  fast as the tenant's regular expressions. Patterns longer than `MAX_PATTERN` characters are
  refused; keep patterns anchored and free of nested quantifiers.

Annotations (title, description, default, examples, deprecated, readOnly, writeOnly, $comment,
contentEncoding, contentMediaType, contentSchema) are accepted and not checked. One keyword
departs from the library: `multipleOf` divides in decimal, so 0.3 is a multiple of 0.1.

Value messages start with the path of the offending value (`data.nova.debug: ...`), like every
other Stead validation message, sorted in the order of the value's own keys.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from fractions import Fraction
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from jsonschema import (  # type: ignore[import-untyped]  # no stubs shipped; types-jsonschema not a dependency
    Draft202012Validator,
    FormatChecker,
    ValidationError,
    validators,
)
from referencing import Registry, Resource
from referencing.exceptions import PointerToNowhere, Unresolvable
from referencing.jsonschema import DRAFT202012

from operators.config.keys import type_name

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


# --- formats ------------------------------------------------------------------------------

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


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)  # a copy: never the shared registry
    checker.checks("date-time", raises=ValueError)(_is_date_time)
    checker.checks("time")(_is_time)
    checker.checks("hostname")(_is_hostname)
    return checker


FORMAT_CHECKER = _format_checker()
FORMATS = tuple(sorted(FORMAT_CHECKER.checkers))


# --- references ---------------------------------------------------------------------------


class ReferenceRefused(LookupError):
    """A `$ref` to something outside the schema: Stead fetches nothing."""


def _refuse(uri: str) -> Resource[Any]:
    raise ReferenceRefused(f"{uri}: only references inside the schema are allowed")


def _registry() -> Registry[Any]:
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


# Draft 2020-12, but for `multipleOf` (decimal rather than binary fractions).
Validator = validators.extend(Draft202012Validator, {"multipleOf": _multiple_of})


# --- the schema itself --------------------------------------------------------------------


def schema_problems(schema: Any, path: str = "schema") -> list[str]:
    """What is wrong with a schema itself, each message naming the path inside the schema."""
    return [f"{path}{problem}" for problem in _checked(schema)[0]]


def _checked(schema: Any) -> tuple[tuple[str, ...], Any]:
    """The schema's problems (messages after the path prefix) and, when it has none, its validator."""
    if isinstance(schema, bool):
        return (), Validator(schema, registry=_registry(), format_checker=FORMAT_CHECKER)
    if not isinstance(schema, Mapping):
        return (f": a schema is a mapping (or true/false), got a {type_name(schema)}",), None
    depth = _depth(schema)
    if depth > MAX_DEPTH:
        return (f": nested {depth} levels deep, more than the {MAX_DEPTH} allowed",), None
    text = json.dumps(schema, separators=(",", ":"), default=str)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        return (f": {len(text.encode())} bytes as JSON, more than the {MAX_SCHEMA_BYTES} allowed",), None
    return _compiled(text)


@lru_cache(maxsize=256)
def _compiled(text: str) -> tuple[tuple[str, ...], Any]:
    schema = json.loads(text)
    found = [*_meta_problems(schema), *_structure_problems(schema)]
    found.sort(key=lambda item: _order(schema, item[0]))
    problems = tuple(dict.fromkeys(_render(where) + ": " + message for where, message in found))
    if problems:
        return problems, None
    expansion = _expansion_problem(schema)
    if expansion:
        return (expansion,), None
    return (), Validator(schema, registry=_registry(), format_checker=FORMAT_CHECKER)


def _depth(value: Any) -> int:
    """How deeply containers nest (iterative: a hostile schema must not exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, level = stack.pop()
        children = current.values() if isinstance(current, Mapping) else current if isinstance(current, list) else ()
        for child in children:
            if isinstance(child, Mapping | list):
                if level + 1 > MAX_DEPTH:
                    return level + 1
                stack.append((child, level + 1))
        deepest = max(deepest, level)
    return deepest


_META = Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=FORMAT_CHECKER)


def _meta_problems(schema: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    for error in _META.iter_errors(schema):
        where = tuple(error.absolute_path)
        index = _keyword_index(where)
        keyword = None if index is None else str(where[index])
        if index is not None and index + 1 < len(where):  # inside a keyword's value: `required[0]`
            if keyword in ("type", "required", "enum"):
                where = where[:index + 1]
            else:
                keyword = None
        yield where, _meta_message(error, keyword)


def _keyword_index(path: Sequence[Any]) -> int | None:
    """Where in `path` the keyword holding the value at `path` is (None when `path` is a schema)."""
    index = 0
    while index < len(path):
        keyword = path[index]
        if keyword in SCHEMA_KEYWORDS:
            index += 1
        elif keyword in SCHEMA_MAP_KEYWORDS or keyword in SCHEMA_LIST_KEYWORDS:
            if index + 1 == len(path):
                return index
            index += 2
        else:
            return index
    return None


def _meta_message(error: ValidationError, keyword: str | None) -> str:
    if error.validator == "type" and error.validator_value == ["object", "boolean"]:
        return f"a schema is a mapping (or true/false), got a {type_name(error.instance)}"
    if keyword == "type":
        return f"must be one of {', '.join(TYPES)} (or a list of them)"
    if keyword in COUNT_KEYWORDS:
        return "must be a non-negative integer"
    if keyword in NUMBER_KEYWORDS:
        return "must be a number"
    if keyword == "multipleOf":
        return "must be a number above 0"
    if keyword == "enum":
        return "must be a list"
    if keyword == "required":
        return "must be a list of property names"
    if keyword == "uniqueItems":
        return "must be true or false"
    if keyword in ("pattern", "patternProperties") and error.validator == "format":
        return f"{error.instance!r} is not a valid regular expression"
    if keyword in SCHEMA_LIST_KEYWORDS:
        return "must be a non-empty list of schemas"
    if keyword in SCHEMA_MAP_KEYWORDS:
        return "must be a mapping of schemas"
    return str(error.message)


def _children(keyword: str, value: Any, where: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if keyword in SCHEMA_KEYWORDS:
        yield where, value
    elif keyword in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
        for name, sub in value.items():
            yield (*where, name), sub
    elif keyword in SCHEMA_LIST_KEYWORDS and isinstance(value, list):
        for index, sub in enumerate(value):
            yield (*where, index), sub


def _structure_problems(schema: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """What the meta-schema lets through: unknown keywords, other dialects, unchecked formats,
    long patterns, and references that do not resolve inside the schema."""
    try:
        resolver = _registry().resolver_with_root(DRAFT202012.create_resource(schema))
    except Exception:  # a malformed $id: `_walk` or the meta-schema says so
        resolver = None
    yield from _walk(schema, (), resolver)


def _walk(schema: Any, where: tuple[Any, ...], resolver: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    if not isinstance(schema, dict):
        return
    if resolver is not None:
        try:
            resolver = resolver.in_subresource(DRAFT202012.create_resource(schema))
        except Exception as error:
            if _is_uri(schema.get("$id")):  # otherwise already said: not a string, or not a URI
                yield (*where, "$id"), f"not a usable URI ({error})"
            resolver = None
    for keyword, value in schema.items():
        at = (*where, keyword)
        if keyword in DROPPED:
            yield at, f"not a draft 2020-12 keyword (use {DROPPED[keyword]})"
        elif keyword not in KEYWORDS:
            close = difflib.get_close_matches(str(keyword), sorted(KEYWORDS), n=1)
            yield at, "unsupported keyword" + (f" (did you mean {close[0]!r}?)" if close else
                                               " (not a JSON Schema 2020-12 keyword)")
        elif keyword == "$id" and isinstance(value, str) and not _is_uri(value):
            yield at, "not a usable URI"
        elif keyword == "$schema" and isinstance(value, str) and value.rstrip("#") != DIALECT:
            yield at, f"Stead validates with JSON Schema draft 2020-12 only ({DIALECT})"
        elif keyword == "format" and isinstance(value, str) and value not in FORMATS:
            yield at, f"format {value!r} is not checked by Stead (checked: {', '.join(FORMATS)})"
        elif keyword == "pattern" and isinstance(value, str) and len(value) > MAX_PATTERN:
            yield at, f"longer than {MAX_PATTERN} characters"
        elif keyword == "patternProperties" and isinstance(value, dict):
            for pattern in value:
                if len(pattern) > MAX_PATTERN:
                    yield at, f"the pattern {pattern[:40]!r}... is longer than {MAX_PATTERN} characters"
        if keyword in ("$ref", "$dynamicRef") and isinstance(value, str) and resolver is not None:
            problem = _reference_problem(resolver, value)
            if problem:
                yield at, problem
        for sub_where, sub in _children(keyword, value, at):
            yield from _walk(sub, sub_where, resolver)


def _is_uri(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        urlsplit(text)
    except ValueError:
        return False
    return True


def _reference_problem(resolver: Any, ref: str) -> str | None:
    try:
        target = resolver.lookup(ref).contents
    except PointerToNowhere:
        return f"{ref!r} points to nothing in the schema"
    except Unresolvable as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, ReferenceRefused):
            cause = cause.__cause__
        if cause is not None:
            return (f"{ref!r} is not inside the schema: only local references (such as '#/$defs/name') "
                    "are allowed, nothing is fetched")
        return f"{ref!r} does not resolve inside the schema ({error})"
    except Exception as error:  # e.g. a pointer through a malformed $defs: the meta-schema says which
        return f"{ref!r} cannot be resolved ({type(error).__name__}: {error})"
    if not isinstance(target, dict | bool):
        return f"{ref!r} points to a {type_name(target)}, not a schema"
    return None


def _expansion_problem(schema: Any) -> str | None:
    """A reference cycle that stays on the same value, or too many subschemas once expanded."""
    resolver = _registry().resolver_with_root(DRAFT202012.create_resource(schema))
    sizes: dict[int, int] = {}
    stack: list[tuple[int, bool]] = []  # (id of a schema being expanded, reached in place from its parent)

    def size(node: Any, node_resolver: Any, in_place: bool) -> int:
        if not isinstance(node, dict):
            return 1
        key = id(node)
        on_stack = [i for i, (k, _) in enumerate(stack) if k == key]
        if on_stack:
            if in_place and all(step for _, step in stack[on_stack[0] + 1:]):
                raise _Cycle
            return 1  # recursion into a deeper value: paid once per value, not expanded again
        if key in sizes:
            return sizes[key]
        if len(stack) >= MAX_NESTING:
            raise _TooDeep
        stack.append((key, in_place))
        here = node_resolver.in_subresource(DRAFT202012.create_resource(node))
        total = 1
        for keyword, value in node.items():
            if keyword in ("$ref", "$dynamicRef") and isinstance(value, str):
                resolved = here.lookup(value)
                total += size(resolved.contents, resolved.resolver, True)
            elif keyword not in NOT_APPLIED:
                for _, sub in _children(keyword, value, ()):
                    total += size(sub, here, keyword in IN_PLACE)
            if total > MAX_EXPANDED:
                raise _TooBig
        stack.pop()
        sizes[key] = total
        return total

    try:
        size(schema, resolver, True)
    except (Unresolvable, ValueError, TypeError) as error:  # not expected after `_structure_problems`
        return f": a reference cannot be resolved ({type(error).__name__}: {error})"
    except _Cycle:
        return ": a reference cycle never reaches a part of the value (a $ref back to a schema in use)"
    except _TooBig:
        return f": more than {MAX_EXPANDED} subschemas once its references are expanded"
    except _TooDeep:
        return f": subschemas nest more than {MAX_NESTING} deep once its references are expanded"
    return None


class _Cycle(Exception):
    pass


class _TooBig(Exception):
    pass


class _TooDeep(Exception):
    pass


def _render(where: Sequence[Any]) -> str:
    """`.properties.a[0]`: the suffix of a path, as Stead writes field paths."""
    return "".join(f"[{segment}]" if isinstance(segment, int) else f".{segment}" for segment in where)


def _order(document: Any, where: Sequence[Any]) -> tuple[int, ...]:
    """Sort key of a path: the position of each segment in its container, as the author wrote it."""
    key: list[int] = []
    current = document
    for segment in where:
        if isinstance(current, dict):
            keys = list(current)
            key.append(keys.index(segment) if segment in current else len(keys))
            current = current.get(segment)
        elif isinstance(current, list) and isinstance(segment, int):
            key.append(segment)
            current = current[segment] if 0 <= segment < len(current) else None
        else:
            key.append(0)
            current = None
    return tuple(key)


# --- values -------------------------------------------------------------------------------

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
    problems, validator = _checked(schema)
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
    kept.sort(key=lambda item: (_order(value, item[0]), RANK.get(item[1], len(RANK))))
    return list(dict.fromkeys(f"{path}{_render(where)}: {message}" for where, _, message in kept))


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
                if name not in properties and not any(re.search(p, name) for p in patterns)]
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


# --- reading schemas (the command line) ---------------------------------------------------


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
        return re.search(pattern, text) is not None
    except re.error:
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
