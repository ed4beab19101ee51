"""Task conditions: yaql over a node's data, with Fuel's change functions.

A condition is evaluated per node, over that node's effective configuration (a dict the caller
passes: `$`), against the same node's data of the environment's last successful run (`last`).
Fuel's functions, as nailgun registers them (yaql turns snake_case names into camelCase):

- `new(expr)`: `expr` over the new data; `old(expr)`: over the last run's data (undefined when
  there was no last run or `expr` fails on it); `isUndef(value)` (`value.isUndef()`) tells.
- `changed(expr)`: `new(expr) != old(expr)`. `changedAny(e1, e2, ...)` / `changedAll(...)`: any /
  all of them changed (Fuel's task files call these; they are written here from their meaning).
- `added(expr)` / `deleted(expr)`: what `expr` gained / lost since the last run (dict keys with
  their new / old values, list items); with no last run everything is added and nothing deleted.

`force` is a run with no last data: every change function is true, `added` is everything.

Legacy (pre-yaql) condition strings: only the literals `true` and `false` are accepted. The
real task files use yaql only; any other legacy expression is refused (at admission by
`condition_problem`, at plan time by `ConditionError`), never silently taken as true.

Bounds: each expression is parsed once (a bounded cache); the engine limits every collection
to `LIMIT_ITERATORS` items and the data an expression builds to `MEMORY_QUOTA`, so a hostile
expression cannot loop over an endless sequence or build huge data; the schema bounds the
text to 8 KiB. The clock is read between yaql's steps only: a single step that runs long is
ended by the planner process's limits (`operators.graphs.planner`), where every evaluation
happens; regexes are RE2's (`operators.graphs.regexes`), never `re`'s.

Errors never quote a value of the data (`describe_failure`): the data is the nodes' configuration.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  (before yaql: yaql 3.2 uses collections.abc without importing it)
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import yaql
from yaql.language import exceptions as yaql_errors
from yaql.language import specs, utils, yaqltypes

from operators.graphs.models import TaskCondition
from operators.graphs.regexes import RegexError, register_yaql

LIMIT_ITERATORS = 10_000
MEMORY_QUOTA = 4_000_000
TIME_BUDGET_SECONDS = 1.0
"""CPU a single evaluation may take: nested loops over bounded collections still multiply, so
every item a yaql iteration yields checks the clock."""
_deadline: ContextVar[float] = ContextVar("stead_yaql_deadline", default=float("inf"))
_ENGINE_OPTIONS = {
    "yaql.limitIterators": LIMIT_ITERATORS,
    "yaql.memoryQuota": MEMORY_QUOTA,
    "yaql.convertTuplesToLists": True,
    "yaql.convertSetsToLists": True,
}


class ConditionError(ValueError):
    """A condition that cannot be evaluated: syntax, an unsupported legacy form, an error or a limit."""


class _Undefined:
    """What `old(...)` is when there is nothing to compare with."""

    def __repr__(self) -> str:
        return "<undefined>"


UNDEFINED = _Undefined()
_engine_lock = threading.Lock()
_engine: Any = None
_root: Any = None


def _get_engine() -> tuple[Any, Any]:
    global _engine, _root
    with _engine_lock:
        if _engine is None:
            engine = yaql.YaqlFactory().create(options=_ENGINE_OPTIONS)
            # yaql keeps its options in `_options` and has no hook per iteration: the checked
            # mapping is the least intrusive way to give every evaluation a deadline.
            engine._options = _CheckedOptions(engine.options)
            _engine = engine
            # yaql's regex library calls `re` (backtracking): RE2's takes its place (`regexes`)
            base = yaql.create_context(regex=False).create_child_context()
            register_yaql(base)
            root = base.create_child_context()
            _register(root)
            _root = root
    return _engine, _root


@lru_cache(maxsize=4096)
def compile_expression(text: str) -> Any:
    """The parsed expression (cached: a graph repeats the same condition over many tasks and nodes)."""
    engine, _ = _get_engine()
    try:
        return engine(text)
    except (yaql_errors.YaqlException, ValueError, TypeError) as error:  # lexer/parser errors
        raise ConditionError(f"yaql does not parse: {error}") from error


def condition_problem(condition: TaskCondition) -> str | None:
    """Why a condition cannot be used (for the admission check), or None."""
    if condition.legacy is not None:
        if condition.legacy.strip().lower() in ("true", "false"):
            return None
        return (f"legacy condition {condition.legacy[:80]!r} is not supported (only 'true' and 'false'); "
                "write it as yaqlExp")
    try:
        compile_expression(condition.yaql_exp or "")
    except ConditionError as error:
        return str(error)
    return None


def evaluate(
    condition: TaskCondition | None,
    data: Mapping[str, Any],
    last: Mapping[str, Any] | None,
    *,
    force: bool = False,
) -> bool:
    """Whether a task runs on a node: its condition over the node's `data`, compared with `last`
    (the node's data of the last successful run; None: there was none, everything changed).
    `force` makes every change function true. No condition: true."""
    if condition is None:
        return True
    if condition.legacy is not None:
        problem = condition_problem(condition)
        if problem:
            raise ConditionError(problem)
        return condition.legacy.strip().lower() == "true"
    return bool(evaluate_expression(condition.yaql_exp or "", data, None if force else last))


def evaluate_expression(text: str, data: Mapping[str, Any], last: Mapping[str, Any] | None) -> Any:
    """The value of a yaql expression (plain data) with the change functions bound to `last`."""
    expression = compile_expression(text)
    _, root = _get_engine()
    context = root.create_child_context()
    new = utils.convert_input_data(dict(data))
    context["$"] = new
    context["$%new"] = new
    context["$%old"] = UNDEFINED if last is None else utils.convert_input_data(dict(last))
    token = _deadline.set(time.monotonic() + TIME_BUDGET_SECONDS)
    try:
        result = expression.evaluate(context=context)
        return _plain(result)
    except _OutOfTime as error:
        raise ConditionError(f"the expression takes longer than {TIME_BUDGET_SECONDS:g}s") from error
    except yaql_errors.CollectionTooLargeException as error:
        raise ConditionError(f"a collection exceeds {LIMIT_ITERATORS} items") from error
    except yaql_errors.MemoryQuotaExceededException as error:
        raise ConditionError("the expression exceeds its memory quota") from error
    except (yaql_errors.YaqlException, ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as error:
        raise ConditionError(describe_failure(error)) from None
    except RecursionError as error:
        raise ConditionError("the expression nests too deeply") from error
    finally:
        _deadline.reset(token)


_NAMED = re.compile(r'"([A-Za-z_#][A-Za-z0-9_#=~!<>+*/%.-]{0,63})"')
"""A function's name in yaql's resolution errors (which go on to quote the receiver's *value*)."""


def describe_failure(error: BaseException) -> str:
    """Why an evaluation failed, without a single value of the data in it.

    Python's and yaql's messages quote the values they were given (`invalid literal for int():
    's3cret'`, `No method "x" for receiver 's3cret'`); the data is the node's configuration, which
    `view` may not read and a GraphRun's status shows to `view`. So only the kind of failure and the
    names the expression itself wrote are said."""
    if isinstance(error, yaql_errors.WrappedException) and isinstance(error.wrapped, BaseException):
        return describe_failure(error.wrapped)
    kind = type(error).__name__
    if isinstance(error, yaql_errors.ResolutionError):
        named = _NAMED.search(str(error))
        what = f"function {named.group(1)!r}" if named else "a function"
        if isinstance(error, (yaql_errors.NoFunctionRegisteredException, yaql_errors.NoMethodRegisteredException)):
            return f"{what} does not exist ({kind})"
        return f"{what} does not accept the arguments it was given ({kind})"
    if isinstance(error, yaql_errors.ArgumentException):
        return f"argument {error.parameter_name!r} is missing or invalid ({kind})"
    if isinstance(error, RegexError):
        return f"a regular expression RE2 refuses: no backreferences or lookaround ({kind})"
    if isinstance(error, ArithmeticError):
        return f"arithmetic fails on the data ({kind})"
    if isinstance(error, LookupError):
        return f"a key or index the expression reads is missing ({kind})"
    return f"a value has the wrong type or form for what the expression does with it ({kind})"


class _OutOfTime(Exception):
    """An evaluation went past its deadline (not a yaql error: nothing in yaql catches it)."""


class _CheckedOptions(Mapping[str, Any]):
    """The engine's options, read by yaql each time it bounds a collection (every call of a function
    taking one, every item it remembers): the place where an evaluation notices its deadline.
    One iteration is bounded by LIMIT_ITERATORS, so a nested loop stops within one inner pass."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._options = dict(options)

    def __getitem__(self, key: str) -> Any:
        if time.monotonic() > _deadline.get():
            raise _OutOfTime
        return self._options[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)


def _plain(value: Any) -> Any:
    """yaql's frozen dicts, tuples and lazy iterators as plain data (bounded), so results compare by value."""
    engine, _ = _get_engine()
    return utils.convert_output_data(value, lambda it: utils.limit_iterable(it, engine), engine)


# --- the change functions ------------------------------------------------------------------------


def _on_new(expression: Callable[[Any], Any], context: Any) -> Any:
    return _plain(expression(context["$%new"]))


def _on_old(expression: Callable[[Any], Any], context: Any) -> Any:
    old = context["$%old"]
    if old is UNDEFINED:
        return UNDEFINED
    try:
        return _plain(expression(old))
    except (yaql_errors.CollectionTooLargeException, yaql_errors.MemoryQuotaExceededException, _OutOfTime):
        raise
    except Exception:  # the old data lacks what the expression reads: as Fuel, that is a change
        return UNDEFINED


def _changed(expression: Callable[[Any], Any], context: Any) -> bool:
    return bool(_on_new(expression, context) != _on_old(expression, context))


def _diff(old: Any, new: Any) -> tuple[Any, Any]:
    """(added, deleted) between two values: dict keys, list items, or the whole value."""
    if isinstance(old, _Undefined):
        return new, None
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        added = {k: v for k, v in new.items() if k not in old or old[k] != v}
        deleted = {k: v for k, v in old.items() if k not in new or new[k] != v}
        return added, deleted
    if isinstance(old, list) and isinstance(new, list):
        return [x for x in new if x not in old], [x for x in old if x not in new]
    if old == new:
        return None, None
    return new, old


def _new(expression: Callable[[Any], Any], context: Any) -> Any:
    return _on_new(expression, context)


def _old(expression: Callable[[Any], Any], context: Any) -> Any:
    return _on_old(expression, context)


def _changed_any(context: Any, *expressions: Callable[[Any], Any]) -> bool:
    return any(_changed(e, context) for e in expressions)


def _changed_all(context: Any, *expressions: Callable[[Any], Any]) -> bool:
    return all(_changed(e, context) for e in expressions)


def _added(expression: Callable[[Any], Any], context: Any) -> Any:
    return _diff(_on_old(expression, context), _on_new(expression, context))[0]


def _deleted(expression: Callable[[Any], Any], context: Any) -> Any:
    return _diff(_on_old(expression, context), _on_new(expression, context))[1]


def _is_undef(receiver: Any) -> bool:
    return receiver is UNDEFINED


def _bounded(iterable: Any) -> Iterator[Any]:
    """A generator of yaql's own making, bounded: at most LIMIT_ITERATORS items, and the clock
    checked as it goes. yaql limits collections only where a function declares an `Iterable`
    parameter; `len()`, `count()` and a few others take plain iterators and would count a
    `range(10**9)` to the end."""
    deadline = _deadline.get()
    for count, item in enumerate(iterable):
        if count >= LIMIT_ITERATORS:
            raise yaql_errors.CollectionTooLargeException(LIMIT_ITERATORS)
        if count % 256 == 0 and time.monotonic() > deadline:
            raise _OutOfTime
        yield item


def _range(stop: int) -> Iterator[int]:
    return _bounded(range(stop))


def _range3(start: int, stop: int, step: int = 1) -> Iterator[int]:
    return _bounded(range(start, stop, step))


def _sequence(start: int = 0, step: int = 1) -> Iterator[int]:
    return _bounded(itertools.count(start, step))


def _repeat(value: Any, times: int = -1) -> Iterator[Any]:
    return _bounded(itertools.repeat(value) if times < 0 else itertools.repeat(value, times))


def _cycle(collection: Any) -> Iterator[Any]:
    return _bounded(itertools.cycle(collection))


def _generators(context: Any) -> None:
    """yaql's generators replaced by bounded ones (same names and parameters; this context layer
    is searched before the standard library's)."""
    for fn, name, params in (
        (_range, "range", {"stop": int}),
        (_range3, "range", {"start": int, "stop": int, "step": int}),
        (_sequence, "sequence", {"start": int, "step": int}),
        (_repeat, "repeat", {"times": int}),
        (_cycle, "cycle", {}),
    ):
        wrapped: Any = specs.name(name)(fn)
        for param, kind in params.items():
            wrapped = specs.parameter(param, kind)(wrapped)
        if name == "repeat":
            wrapped = specs.parameter("value", nullable=True)(wrapped)
        if name == "cycle":
            wrapped = specs.parameter("collection", yaqltypes.Iterable())(wrapped)
        if name in ("repeat", "cycle"):  # methods in yaql: `1.repeat()`, `[1].cycle()`; functions too here
            wrapped = specs.extension_method(wrapped)
        context.register_function(wrapped)


def _register(context: Any) -> None:
    """Fuel's functions, by their yaql names (lambdas: each argument is evaluated by the function,
    on the new data and on the old). yaql's decorators are applied as calls: they are untyped."""
    functions: list[tuple[Callable[..., Any], str, str | None]] = [
        (_new, "new", "expression"),
        (_old, "old", "expression"),
        (_changed, "changed", "expression"),
        (_changed_any, "changedAny", "expressions"),
        (_changed_all, "changedAll", "expressions"),
        (_added, "added", "expression"),
        (_deleted, "deleted", "expression"),
    ]
    for fn, name, lambda_param in functions:
        wrapped: Any = specs.name(name)(fn)
        if lambda_param is not None:
            wrapped = specs.parameter(lambda_param, yaqltypes.Lambda())(wrapped)
        context.register_function(wrapped)
    context.register_function(specs.method(specs.name("isUndef")(_is_undef)))
    _generators(context)
