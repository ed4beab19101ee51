"""Service orders (issue 31, item 3): the pure logic of a ServiceOrder, no I/O.

An order is a set of items, each creating, updating or deleting one ServiceInstance of the order's
namespace, with dependencies between items (Inmanta's service orders). This module

- checks an order alone (`order_problems`): what the schema cannot say (an item's fields for its
  action, dependencies on unknown items, cycles, two unordered items on one instance), so that the
  webhook refuses it at `kubectl apply` naming the items;
- plans a step of it (`advance_order`): which items start now (their dependencies completed), which are
  skipped (a dependency failed or was skipped: `DependencyFailed` naming it), and the overall result;
- reads an item's outcome off its instance (`item_outcome`): completed when the instance is Ready at
  (or after) the generation the item wrote, failed when it is Stalled there.

The kind's step (`operators.lsm.ordering`) only does the writes and reads these decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from operators.lsm.models import FailureType, OrderItem, OrderItemStatus, OrderResult, ServiceOrderSpec
from operators.runtime import parse_spec

TERMINAL = frozenset({"completed", "failed", "skipped"})


# --- checks ---------------------------------------------------------------------------------------


def _cycle(items: Sequence[OrderItem]) -> list[str] | None:
    """One dependency cycle as the ids along it (first id repeated at the end), or None."""
    deps = {item.id: [d for d in item.dependencies if d != item.id] for item in items}
    colour: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        path.append(node)
        for dep in deps.get(node, ()):
            if dep not in deps:
                continue
            if colour.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if colour.get(dep) is None:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        colour[node] = 2
        return None

    for item in items:
        if colour.get(item.id) is None:
            found = visit(item.id)
            if found:
                return found
    return None


def _ancestors(items: Sequence[OrderItem]) -> dict[str, set[str]]:
    """Each item's dependencies, transitively (for an acyclic order)."""
    deps = {item.id: set(item.dependencies) for item in items}
    out: dict[str, set[str]] = {}

    def of(node: str) -> set[str]:
        if node not in out:
            out[node] = set()
            for dep in deps.get(node, ()):
                out[node] |= {dep, *of(dep)}
        return out[node]

    for item in items:
        of(item.id)
    return out


def order_problems(spec: ServiceOrderSpec) -> list[str]:
    """What is wrong with an order on its own, each problem naming the field and the items."""
    problems: list[str] = []
    ids = [item.id for item in spec.items]
    seen: set[str] = set()
    for index, item in enumerate(spec.items):
        where = f"spec.items[{index}] ({item.id})"
        if item.id in seen:
            problems.append(f"{where}.id: {item.id!r} is the id of an earlier item")
        seen.add(item.id)
        if item.action == "create" and item.entity is None:
            problems.append(f"{where}.entity: required with action create")
        if item.action != "create" and item.entity is not None:
            problems.append(f"{where}.entity: only with action create (an {item.action} keeps the instance's entity)")
        if item.action == "update" and not item.attributes:
            problems.append(f"{where}.attributes: required with action update (the attributes to change)")
        if item.action == "delete" and item.attributes is not None:
            problems.append(f"{where}.attributes: not with action delete")
        for dep in item.dependencies:
            if dep == item.id:
                problems.append(f"{where}.dependencies: item {item.id!r} depends on itself")
            elif dep not in ids:
                problems.append(f"{where}.dependencies: item {item.id!r} depends on {dep!r}, which is no item of this "
                                f"order (items: {', '.join(ids)})")
    if problems:
        return problems
    cycle = _cycle(spec.items)
    if cycle:
        return [f"spec.items: a dependency cycle: {' -> '.join(cycle)} (no item of it could ever start)"]
    ancestors = _ancestors(spec.items)
    by_instance: dict[str, list[str]] = {}
    for item in spec.items:
        by_instance.setdefault(item.instance, []).append(item.id)
    for instance, on in by_instance.items():
        for i, first in enumerate(on):
            for second in on[i + 1:]:
                if first not in ancestors[second] and second not in ancestors[first]:
                    problems.append(f"spec.items: items {first!r} and {second!r} both change instance {instance!r} "
                                    "and neither depends on the other (their order would be a race)")
    return problems


def order_spec_problems(spec: Mapping[str, Any]) -> list[str]:
    """`Kind.problems` of a ServiceOrder: the checks beyond its schema (run by the webhook and the pipeline)."""
    try:
        parsed = parse_spec(ServiceOrderSpec, spec)
    except ValidationError:
        return []  # the schema's problem: the API server names it
    return order_problems(parsed)


# --- progress -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What one reconcile of an order does: the items to start now, and every item's status after the skips."""

    start: tuple[OrderItem, ...]
    items: tuple[OrderItemStatus, ...]
    result: OrderResult


def initial_items(spec: ServiceOrderSpec) -> dict[str, OrderItemStatus]:
    return {item.id: OrderItemStatus(id=item.id, state="waiting") for item in spec.items}


def _failure_of(status: OrderItemStatus) -> str:
    if status.state == "skipped":
        return f"{status.id!r} was skipped"
    return f"{status.id!r} failed ({status.failure_type or 'Failed'})"


def order_result(states: Sequence[OrderItemStatus]) -> OrderResult:
    """in_progress until every item ended; then completed, failed (none completed) or partial."""
    if any(s.state not in TERMINAL for s in states):
        return "in_progress"
    done = sum(s.state == "completed" for s in states)
    if done == len(states):
        return "completed"
    return "partial" if done else "failed"


def advance_order(spec: ServiceOrderSpec, current: Mapping[str, OrderItemStatus], now: str) -> Step:
    """Skip the waiting items whose dependencies failed or were skipped (transitively, in dependency order),
    and pick the waiting items whose dependencies all completed. Items of other states are kept as they are."""
    states = {**initial_items(spec), **{k: v for k, v in current.items() if k in {i.id for i in spec.items}}}
    changed = True
    while changed:  # a skip can make its dependents skip: until nothing changes (at most len(items) rounds)
        changed = False
        for item in spec.items:
            if states[item.id].state != "waiting":
                continue
            blocked = [states[d] for d in item.dependencies if states[d].state in ("failed", "skipped")]
            if blocked:
                states[item.id] = OrderItemStatus(
                    id=item.id, state="skipped", failure_type="DependencyFailed", time=now,
                    message=f"not applied: its dependency {_failure_of(blocked[0])}")
                changed = True
    start = tuple(item for item in spec.items if states[item.id].state == "waiting"
                  and all(states[d].state == "completed" for d in item.dependencies))
    ordered = tuple(states[item.id] for item in spec.items)
    return Step(start=start, items=ordered, result=order_result(ordered))


def _condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return condition  # type: ignore[no-any-return]
    return None


def _failure_type(obj: Mapping[str, Any]) -> FailureType:
    phase = (obj.get("status") or {}).get("phase")
    return "Rejected" if phase == "Rejected" else "Refused" if phase == "Refused" else "Failed"


def item_outcome(item: OrderItem, status: OrderItemStatus, obj: Mapping[str, Any] | None, now: str
                 ) -> OrderItemStatus | None:
    """The item's new status read off its instance (`obj`, None when there is none), or None while the
    instance still works on it. A create or update is judged at the generation it wrote or later only (an
    older Ready says nothing of it); a delete completes when the object is gone."""
    if item.action == "delete":
        if obj is None:
            return status.model_copy(update={"state": "completed", "time": now,
                                             "message": f"instance {item.instance} deleted"})
        stalled = _condition(obj, "Stalled")
        if stalled is not None and stalled.get("status") == "True":
            return status.model_copy(update={"state": "failed", "failure_type": "Failed", "time": now,
                                             "message": f"{stalled.get('reason')}: {stalled.get('message')}"})
        return None
    if obj is None:
        return status.model_copy(update={"state": "failed", "failure_type": "Gone", "time": now,
                                         "message": f"instance {item.instance} went before it settled"})
    wrote = status.generation or 1
    for type_ in ("Ready", "Stalled"):
        condition = _condition(obj, type_)
        if condition is None or condition.get("status") != "True" \
                or int(condition.get("observedGeneration") or 0) < wrote:
            continue
        if type_ == "Ready":
            state = (obj.get("status") or {}).get("state")
            return status.model_copy(update={"state": "completed", "time": now,
                                             "message": f"instance {item.instance} {item.action}d (state {state})"})
        return status.model_copy(update={"state": "failed", "failure_type": _failure_type(obj), "time": now,
                                         "message": f"{condition.get('reason')}: {condition.get('message')}"})
    return None


def summary(states: Sequence[OrderItemStatus]) -> str:
    """One line for the order's condition: the items not completed and why."""
    parts = [f"{s.id} {s.state}" + (f" ({s.failure_type}: {s.message})" if s.failure_type else "")
             for s in states if s.state != "completed"]
    return "; ".join(parts) or "every item completed"
