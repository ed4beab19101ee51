"""Tenants' regular expressions, matched in linear time (RE2).

A graph's `/regex/` task and role references, a run's subgraph `start` and `end`, and the regex
functions of yaql conditions (`=~`, `!~`, `regex()`, `matches`, `search`, `searchAll`, `split`,
`replace`, `replaceBy`) are written by tenants. Python's `re` backtracks: `(a+)+$` against 30 `a`s
and a `!` takes minutes, and no deadline can interrupt a single `re` call. RE2 (`google-re2`) runs
in time linear in the text and refuses what would need backtracking (backreferences, lookaround),
so the refusal is at admission, naming the field, instead of a frozen planner.

yaql's own regex library calls `re`; `register_yaql` puts the same functions, with the same names
and signatures, over RE2 in a context layer that is searched first (the context must be created
with `regex=False`, so the `re` versions are not reachable at all).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2

from operators.runtime import MAX_MEMORY, RegexError, compile_pattern

__all__ = ["MAX_MEMORY", "RegexError", "compile_pattern", "register_yaql"]


REGEX_TYPE = type(compile_pattern("."))


def _flags(ignore_case: bool, multi_line: bool, dot_all: bool) -> str:
    flags = "".join(f for f, on in (("i", ignore_case), ("m", multi_line), ("s", dot_all)) if on)
    return f"(?{flags})" if flags else ""


def _regex(pattern: str, ignore_case: bool = False, multi_line: bool = False, dot_all: bool = False) -> Any:
    return compile_pattern(_flags(ignore_case, multi_line, dot_all) + pattern)


def _matches(regexp: Any, string: str) -> bool:
    return regexp.search(string) is not None


def _matches_string(string: str, regexp: str) -> bool:
    return compile_pattern(regexp).search(string) is not None


def _operator_match(string: str, regexp: Any) -> bool:
    return (compile_pattern(regexp) if isinstance(regexp, str) else regexp).search(string) is not None


def _operator_no_match(string: str, regexp: Any) -> bool:
    return not _operator_match(string, regexp)


def _publish_match(context: Any, match: Any) -> None:
    """`$1` the whole match, `$2`... the groups, `$name` named groups: {value, start, end} (yaql's form)."""
    context["$1"] = {"value": match.group(), "start": match.start(0), "end": match.end(0)}
    for i, value in enumerate(match.groups(), 1):
        context[f"${i + 1}"] = {"value": value, "start": match.start(i), "end": match.end(i)}
    for name, value in match.groupdict().items():
        context[f"${name}"] = {"value": value, "start": match.start(name), "end": match.end(name)}


def _search(context: Any, regexp: Any, string: str, selector: Any = None) -> Any:
    found = regexp.search(string)
    if found is None:
        return None
    if selector is None:
        return found.group()
    child = context.create_child_context()
    _publish_match(child, found)
    return selector(child)


def _search_all(context: Any, regexp: Any, string: str, selector: Any = None) -> Iterator[Any]:
    for found in regexp.finditer(string):
        if selector is None:
            yield found.group()
        else:
            child = context.create_child_context()
            _publish_match(child, found)
            yield selector(child)


def _split(regexp: Any, string: str, max_split: int = 0) -> list[str]:
    return list(regexp.split(string, max_split))


def _split_string(string: str, regexp: Any, max_split: int = 0) -> list[str]:
    return _split(regexp, string, max_split)


def _replace(regexp: Any, string: str, repl: str, count: int = 0) -> str:
    return str(regexp.sub(repl, string, count))


def _replace_string(string: str, regexp: Any, repl: str, count: int = 0) -> str:
    return _replace(regexp, string, repl, count)


def _replace_by(context: Any, regexp: Any, string: str, repl: Any, count: int = 0) -> str:
    def each(found: Any) -> str:
        child = context.create_child_context()
        _publish_match(child, found)
        return str(repl(child))

    return str(regexp.sub(each, string, count))


def _replace_by_string(context: Any, string: str, regexp: Any, repl: Any, count: int = 0) -> str:
    return _replace_by(context, regexp, string, repl, count)


def _escape_regex(string: str) -> str:
    return str(re2.escape(string))


def _is_regex(value: Any) -> bool:
    return isinstance(value, REGEX_TYPE)


def register_yaql(context: Any) -> None:
    """yaql's regex library (names and signatures of `yaql.standard_library.regex`), over RE2.
    A regex given as a string is compiled here, with RE2, wherever yaql would take one."""
    from yaql.language import specs, yaqltypes  # here: `stead graph` checks regexes without loading yaql

    regex_or_string = yaqltypes.PythonType((str, REGEX_TYPE))
    string = yaqltypes.String()
    selector = yaqltypes.Lambda(with_context=True)
    p = specs.parameter
    functions: list[Any] = [
        specs.name("regex")(p("pattern", string)(_regex)),
        specs.method(specs.name("matches")(p("regexp", REGEX_TYPE)(p("string", string)(_matches)))),
        specs.method(specs.name("matches")(p("string", string)(p("regexp", string)(_matches_string)))),
        specs.name("#operator_=~")(p("string", string)(p("regexp", regex_or_string)(_operator_match))),
        specs.name("#operator_!~")(p("string", string)(p("regexp", regex_or_string)(_operator_no_match))),
        specs.method(specs.name("search")(p("regexp", REGEX_TYPE)(p("string", string)(p("selector", selector)(
            _search))))),
        specs.method(specs.name("searchAll")(p("regexp", REGEX_TYPE)(p("string", string)(p("selector", selector)(
            _search_all))))),
        specs.method(specs.name("split")(p("regexp", REGEX_TYPE)(p("string", string)(p("max_split", int)(
            _split))))),
        specs.method(specs.name("split")(p("string", string)(p("regexp", REGEX_TYPE)(p("max_split", int)(
            _split_string))))),
        specs.method(specs.name("replace")(p("regexp", REGEX_TYPE)(p("string", string)(p("repl", string)(
            p("count", int)(_replace)))))),
        specs.method(specs.name("replace")(p("string", string)(p("regexp", REGEX_TYPE)(p("repl", string)(
            p("count", int)(_replace_string)))))),
        specs.method(specs.name("replaceBy")(p("regexp", REGEX_TYPE)(p("string", string)(p("repl", selector)(
            p("count", int)(_replace_by)))))),
        specs.method(specs.name("replaceBy")(p("string", string)(p("regexp", REGEX_TYPE)(p("repl", selector)(
            p("count", int)(_replace_by_string)))))),
        specs.name("escapeRegex")(p("string", string)(_escape_regex)),
        specs.name("isRegex")(_is_regex),
    ]
    for function in functions:
        context.register_function(function)
