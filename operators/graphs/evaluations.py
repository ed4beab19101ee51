"""Condition evaluations shared between nodes: a plan evaluates a condition once for the nodes whose data
agree on what it reads.

fuel-library repeats a condition over every node of its roles, and the nodes of a role mostly have the same
configuration, so most of a large environment's evaluations are repeats; yaql's overload resolution makes
each one cost 0.5 to 2 ms (issue 32: 85% of a 200 tasks x 100 nodes plan). `reads` says which keys of `$`
an expression can read (statically, over-approximated), `SharedEvaluations` keys each evaluation by those
values (canonical: types and key order kept) and gives every node the result `conditions.evaluate` gives
on its own data.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from yaql.language import expressions as yaql_expressions

from operators.graphs.conditions import NODE_KEYS, ConditionError, compile_expression, evaluate
from operators.graphs.models import TaskCondition

_ATTRIBUTE = ("#operator_.", "#operator_?.")


@lru_cache(maxsize=4096)
def reads(text: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The keys of `$` an expression reads: (`$.key` / `$?.key`, `$.get('key', ...)`), or None when it
    may read more (a bare `$`, `$[...]`, `$.keys()`, a variable, a `get` of a computed key) or does not
    parse. Every `$` is counted, also one inside a lambda that stands for an item (`select($.ip)`):
    more keys than read, never fewer, so a value outside them cannot change the result."""
    try:
        expression = compile_expression(text)
    except ConditionError:
        return None
    keys: set[str] = set()
    fuel_keys: set[str] = set()
    nodes: list[Any] = [expression]
    while nodes:
        node = nodes.pop()
        if isinstance(node, yaql_expressions.Constant):
            continue
        if isinstance(node, yaql_expressions.Wrap):
            nodes.append(node.expr)
            continue
        if isinstance(node, yaql_expressions.MappingRuleExpression):
            nodes.extend((node.source, node.destination))
            continue
        if not isinstance(node, yaql_expressions.Function):
            return None
        if isinstance(node, yaql_expressions.GetContextValue):
            return None  # a `$` (or `$name`) read whole: only `$.key` and `$.get('key')` are followed
        if node.name in _ATTRIBUTE and _is_data(node.args[0]):
            key = node.args[1]
            if type(key) is yaql_expressions.KeywordConstant:
                keys.add(key.value)
            elif type(key) is yaql_expressions.Function and key.name == "get" and 1 <= len(key.args) <= 2 \
                    and all(isinstance(a, yaql_expressions.Constant) for a in key.args) \
                    and isinstance(key.args[0].value, str):
                fuel_keys.add(key.args[0].value)
            else:
                return None
            continue
        nodes.extend(node.args)
    return frozenset(keys), frozenset(fuel_keys)


def _is_data(node: Any) -> bool:
    """Whether an expression node is `$` itself."""
    return isinstance(node, yaql_expressions.GetContextValue) and node.path.value == "$"


class _Unshared(Exception):
    """A value that `_canonical` does not take (not plain data): its condition is evaluated per node."""


def _canonical(value: Any) -> Any:
    """A hashable form of plain data that is equal only for values yaql cannot tell apart: types kept
    (1, 1.0 and True differ) and the order of a mapping's keys (`keys()` lists them in order)."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is float or kind is bool:
        return kind.__name__, value
    if isinstance(value, Mapping):
        return "map", tuple((_canonical(k), _canonical(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "list", tuple(_canonical(v) for v in value)
    raise _Unshared


class SharedEvaluations:
    """A plan's condition evaluations, shared between nodes whose data agree on what the expression
    reads (`reads`): fuel-library repeats a condition over every node, and nodes of a role mostly
    have the same configuration, so most evaluations of a large environment are repeats. The result
    is the one `evaluate` gives on the node's own data (a repeat is evaluated once; a failure is never
    shared: the next node evaluates again and fails, or not, by itself)."""

    def __init__(self, *, force: bool) -> None:
        self.force = force
        self._results: dict[tuple[str, Any, Any], bool] = {}
        self._values: dict[tuple[str, bool, str, bool], Any] = {}
        self._shared: dict[int, tuple[Any, Any]] = {}  # id -> (value, canonical): a value many nodes hold
        self.evaluated = 0

    def evaluate(self, condition: TaskCondition, node: str, data: Mapping[str, Any],
                 last: Mapping[str, Any] | None) -> bool:
        """`evaluate(condition, data, last, force=...)`, once for nodes that read the same values.
        `node` names the data (a node's data and last data stay the same during a plan)."""
        key = self._key(condition, node, data, None if self.force else last)
        if key is not None:
            found = self._results.get(key)
            if found is not None:
                return found
        self.evaluated += 1
        value = evaluate(condition, data, last, force=self.force)
        if key is not None:
            self._results[key] = value
        return value

    def _key(self, condition: TaskCondition, node: str, data: Mapping[str, Any],
             last: Mapping[str, Any] | None) -> tuple[str, Any, Any] | None:
        if condition.yaql_exp is None:
            return None
        read = reads(condition.yaql_exp)
        if read is None:
            return None
        try:
            new = self._fingerprint(read, node, False, data)
            old = None if last is None else self._fingerprint(read, node, True, last)
        except _Unshared:
            return None
        return condition.yaql_exp, new, old

    def _fingerprint(self, read: tuple[frozenset[str], frozenset[str]], node: str, old: bool,
                     data: Mapping[str, Any]) -> tuple[Any, ...]:
        keys, fuel_keys = read
        return (tuple(self._value(node, old, data, key, False) for key in sorted(keys)),
                tuple(self._value(node, old, data, key, True) for key in sorted(fuel_keys)))

    def _value(self, node: str, old: bool, data: Mapping[str, Any], key: str, fuel: bool) -> Any:
        """What `$.key` (or `fuel_get`'s `$.get('key')`) reads of a node's data, canonical."""
        cached = (node, old, key, fuel)
        if cached in self._values:
            return self._values[cached]
        if key in data or not fuel:
            value = ("in", self._canonical(data[key])) if key in data else ("absent",)
        else:  # fuel_get: the resources that hold the key, by name
            value = ("resources", tuple((name, self._canonical(held[key])) for name, held in data.items()
                                        if name not in NODE_KEYS and isinstance(held, Mapping) and key in held))
        self._values[cached] = value
        return value

    def _canonical(self, value: Any) -> Any:
        """`_canonical`, once for a container that many nodes' data hold (`nodes`, shared resources)."""
        if not isinstance(value, (Mapping, list, tuple)):
            return _canonical(value)
        shared = self._shared.get(id(value))
        if shared is None:
            shared = self._shared[id(value)] = (value, _canonical(value))  # the value kept: its id stays its own
        return shared[1]
