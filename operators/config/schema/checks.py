"""Checking a schema when its ConfigComponent is applied: the meta-schema, unknown and dropped
keywords, references, and the bounds on the work."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from jsonschema import (  # type: ignore[import-untyped]  # no stubs shipped; types-jsonschema not a dependency
    Draft202012Validator,
    ValidationError,
)
from referencing.exceptions import PointerToNowhere, Unresolvable
from referencing.jsonschema import DRAFT202012

from operators.config.keys import type_name
from operators.config.schema.dialect import (
    COUNT_KEYWORDS,
    DIALECT,
    DROPPED,
    FORMAT_CHECKER,
    FORMATS,
    IN_PLACE,
    KEYWORDS,
    MAX_DEPTH,
    MAX_EXPANDED,
    MAX_NESTING,
    MAX_PATTERN,
    MAX_SCHEMA_BYTES,
    NOT_APPLIED,
    NUMBER_KEYWORDS,
    SCHEMA_KEYWORDS,
    SCHEMA_LIST_KEYWORDS,
    SCHEMA_MAP_KEYWORDS,
    TYPES,
    ReferenceRefused,
    Validator,
    local_registry,
)
from operators.runtime import RegexError


def schema_problems(schema: Any, path: str = "schema") -> list[str]:
    """What is wrong with a schema itself, each message naming the path inside the schema."""
    return [f"{path}{problem}" for problem in checked(schema)[0]]


def checked(schema: Any) -> tuple[tuple[str, ...], Any]:
    """The schema's problems (messages after the path prefix) and, when it has none, its validator."""
    if isinstance(schema, bool):
        return (), Validator(schema, registry=local_registry(), format_checker=FORMAT_CHECKER)
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
    found.sort(key=lambda item: author_order(schema, item[0]))
    problems = tuple(dict.fromkeys(render_path(where) + ": " + message for where, message in found))
    if problems:
        return problems, None
    expansion = _expansion_problem(schema)
    if expansion:
        return (expansion,), None
    return (), Validator(schema, registry=local_registry(), format_checker=FORMAT_CHECKER)


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
        why = f" ({error.cause})" if isinstance(error.cause, RegexError) else ""
        return f"{error.instance!r} is not a valid regular expression{why}"
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
        resolver = local_registry().resolver_with_root(DRAFT202012.create_resource(schema))
    except Exception:  # a malformed $id: `_walk` or the meta-schema says so
        resolver = None
    yield from _walk(schema, (), resolver, _uses(schema, "patternProperties"))


def _uses(schema: Any, keyword: str) -> bool:
    """Whether `keyword` is a keyword anywhere in `schema` (not a property name it declares)."""
    if not isinstance(schema, dict):
        return False
    return keyword in schema or any(_uses(sub, keyword) for key, value in schema.items()
                                    for _, sub in _children(key, value, ()))


def _walk(schema: Any, where: tuple[Any, ...], resolver: Any,
          pattern_properties: bool = False) -> Iterator[tuple[tuple[Any, ...], str]]:
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
        elif keyword == "unevaluatedProperties" and pattern_properties:
            yield at, ("not supported in a schema with patternProperties (Stead matches patterns with RE2, "
                       "and this combination would not be): use additionalProperties")
        if keyword in ("$ref", "$dynamicRef") and isinstance(value, str) and resolver is not None:
            problem = _reference_problem(resolver, value)
            if problem:
                yield at, problem
        for sub_where, sub in _children(keyword, value, at):
            yield from _walk(sub, sub_where, resolver, pattern_properties)


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
    resolver = local_registry().resolver_with_root(DRAFT202012.create_resource(schema))
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


def render_path(where: Sequence[Any]) -> str:
    """`.properties.a[0]`: the suffix of a path, as Stead writes field paths."""
    return "".join(f"[{segment}]" if isinstance(segment, int) else f".{segment}" for segment in where)


def author_order(document: Any, where: Sequence[Any]) -> tuple[int, ...]:
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
