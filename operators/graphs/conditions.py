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

**Reading a configuration value.** `$` is the node's effective configuration keyed by resource
(`$.astute.debug`, `$.astute.get('debug', false)`), plus `node` and `nodes`. Fuel's data had no
resources: its task files write `$.get('debug', false)`. That spelling is accepted where it is
unambiguous (`fuel_get`): a key of `$` itself (a resource, `node`, `nodes`) is that; else the key of
the one resource that has it; no resource: the default; several: an error naming them (write
`$.RESOURCE.get(...)`). Fuel's bare `$.debug` is not translated: it reads the resource `debug`.

**Checked at upload** (`condition_problem`, beyond parsing): every function and method the
expression calls exists (`foo(1)`, `$.x.lenght()`), and no bare word is an operand of a
subtraction: yaql reads `$.node.name = cmp-1` as `$.node.name = (cmp - 1)` (a bare word is the
string of its name, and no `-` takes a string), which can only fail, so a name with a dash must be
quoted (`'cmp-1'`). Bare words elsewhere are yaql strings and stay legal (`$.role = compute`).

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
from yaql.language import expressions as yaql_expressions
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
    """Why a condition cannot be used (for the admission check), or None: it does not parse, calls a
    function that does not exist, or subtracts from a bare word (`static_problem`). The expression is
    quoted (it is the tenant's own text, never data)."""
    if condition.legacy is not None:
        if condition.legacy.strip().lower() in ("true", "false"):
            return None
        return (f"legacy condition {condition.legacy[:80]!r} is not supported (only 'true' and 'false'); "
                "write it as yaqlExp")
    text = condition.yaql_exp or ""
    try:
        problem = static_problem(compile_expression(text))
    except ConditionError as error:
        problem = str(error)
    if problem is None:
        return None
    shown = " ".join(text.split())
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return f"yaqlExp {shown!r}: {problem}"


_METHOD_CALLS = ("#operator_.", "#operator_?.")
"""The operators whose right operand is a method call (`$.x.len()`, `$?.x.len()`)."""


def static_problem(expression: Any) -> str | None:
    """What a parsed expression certainly gets wrong, whatever the data: a function or method it calls
    that is not defined (unless it defines functions itself, with `def`), or a bare word in a
    subtraction. None when nothing is found (evaluation may still fail on the data)."""
    _, root = _get_engine()
    nodes: list[tuple[Any, bool]] = [(expression, False)]
    calls: list[tuple[str, bool]] = []
    while nodes:
        node, as_method = nodes.pop()
        if isinstance(node, yaql_expressions.MappingRuleExpression):
            nodes.extend(((node.source, False), (node.destination, False)))
            continue
        if isinstance(node, yaql_expressions.Wrap):
            nodes.append((node.expr, False))
            continue
        if not isinstance(node, yaql_expressions.Function):
            continue
        if isinstance(node, (yaql_expressions.BinaryOperator, yaql_expressions.UnaryOperator)) \
                and node.operator == "-":
            bare = [a for a in node.args if type(a) is yaql_expressions.KeywordConstant]
            if bare:
                written = _written(node)
                hint = f" ('{written}')" if written else ""
                return (f"the bare word {bare[0].value!r} is an operand of a subtraction (yaql reads "
                        f"{written or bare[0].value + '-...'!r} as a subtraction, which cannot take a string): "
                        f"quote the name{hint}")
        name = str(node.name)
        if not name.startswith(("#", "*")):
            calls.append((name, as_method))
        method_call = name in _METHOD_CALLS
        for index, arg in enumerate(node.args):
            nodes.append((arg, method_call and index == 1))
    if any(name == "def" for name, _ in calls):
        return None  # the expression defines functions of its own: their names are not known here
    for name, as_method in calls:
        kind = "method" if as_method else "function"
        found = root.collect_functions(
            name, (lambda fd, ctx: fd.is_method) if as_method else (lambda fd, ctx: fd.is_function))
        if not found:
            return f"no {kind} {name!r} in yaql or Fuel's functions"
    return None


def _written(node: Any) -> str | None:
    """How a subtraction of bare words and constants was written (`cmp-1`), or None when it holds more."""
    if type(node) is yaql_expressions.KeywordConstant or (
            type(node) is yaql_expressions.Constant and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)):
        return str(node.value)
    if isinstance(node, (yaql_expressions.BinaryOperator, yaql_expressions.UnaryOperator)) \
            and node.operator == "-":
        parts = [_written(a) for a in node.args]
        if all(p is not None for p in parts):
            return "-".join(str(p) for p in parts) if len(parts) == 2 else f"-{parts[0]}"
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
    except AmbiguousKey as error:
        raise ConditionError(str(error)) from None
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


NODE_KEYS = ("node", "nodes")
"""What a node's data holds beside its resources (`operators.graphs.run.node_data`)."""


class AmbiguousKey(Exception):
    """`$.get(key)` for a key that several resources have (not a yaql error: yaql passes it on)."""


def fuel_get(data: Mapping[str, Any], key: Any, default: Any = None) -> Any:
    """Fuel's `$.get(key, default)` over Stead's data, keyed by resource: `data[key]` when `$` has the
    key itself (a resource, `node`, `nodes`); else the value of the one resource that has the key; no
    resource: `default`; several: `AmbiguousKey` naming them (never a value)."""
    try:
        if key in data:
            return data[key]
    except TypeError:  # an unhashable key: no resource has it
        return default
    holders = sorted(str(name) for name, value in data.items()
                     if name not in NODE_KEYS and isinstance(value, Mapping) and key in value)
    if not holders:
        return default
    if len(holders) > 1:
        raise AmbiguousKey(f"$.get({key!r}): the key is in several resources ({', '.join(holders)}): name one, "
                           f"e.g. $.{holders[0]}.get({key!r}, ...)")
    return data[holders[0]][key]


def _get(context: Any, receiver: Mapping[str, Any], key: Any, default: Any = None) -> Any:
    """`get` of a mapping: Fuel's lookup (`fuel_get`) when the mapping is the node's data itself (new or
    old), yaql's own (`dict.get`) for any other."""
    if receiver is context["$%new"] or receiver is context["$%old"]:
        return fuel_get(receiver, key, default)
    return receiver.get(key, default)


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
    # found before the standard library's dict.get (this layer is searched first)
    getter: Any = specs.parameter("receiver", utils.MappingType)(specs.name("get")(_get))
    getter = specs.parameter("key", nullable=True)(specs.parameter("default", nullable=True)(getter))
    context.register_function(specs.method(getter))
    _generators(context)

