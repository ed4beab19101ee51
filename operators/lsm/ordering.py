"""The ServiceOrder kind at work: its steps translate `operators.lsm.orders`' decisions into writes of
ServiceInstances and reads of them.

| phase | step |
|---|---|
| Init | the order alone is checked again (objects that bypassed the webhook) |
| Running | items whose dependencies completed are written; items written are read off their instances |

The order ends Provisioned (Ready) when every item completed; `Failed` (none completed) or `Partial`
(some did) otherwise, Stalled naming the items that failed and why. While items run it waits, and is
checked again when one of its instances becomes Ready or Stalled or goes (`depends_on`), with a slow
poll as a safety net.

The writes are the operator's, in the order's own namespace only (an item names an instance, never a
namespace): whoever may create ServiceOrders in a namespace may change its instances through them, as
the `edit` role already allows both. The inventory API's order route checks its caller's permission on
the instances of each item before it creates the order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators import API_VERSION
from operators.lsm.models import (
    SERVICE_INSTANCE,
    OrderItem,
    OrderItemStatus,
    ServiceOrderSpec,
)
from operators.lsm.orders import TERMINAL, advance_order, item_outcome, order_problems, summary
from operators.lsm.wire import merge_ready
from operators.runtime import (
    ApiError,
    Objects,
    PermanentError,
    StepContext,
    TemporaryError,
    spec_step,
    utc_now,
)

ORDER_ANNOTATION = "stead.dev/order"
"""On an instance an order created or updated: `<order>/<item id>` (a create seen again after a lost status
write is recognised as the order's own, not refused as taken)."""
POLL_SECONDS = 10.0
"""A safety net only: an order is checked again when one of its instances becomes Ready or Stalled or goes."""
REFUSED_STATUSES = frozenset({400, 403, 404, 409, 422})
"""Answers that refuse the item's write for good (the webhook's lifecycle checks, RBAC, a taken name)."""


def _items(status: Mapping[str, Any]) -> dict[str, OrderItemStatus]:
    out = {}
    for raw in status.get("items") or []:
        try:
            parsed = OrderItemStatus.model_validate(raw)
        except ValueError:
            continue
        out[parsed.id] = parsed
    return out


def _facts(states: list[OrderItemStatus], result: str) -> dict[str, Any]:
    return {"result": result, "itemCount": len(states),
            "completedCount": sum(s.state == "completed" for s in states),
            "items": [s.model_dump(by_alias=True, mode="json", exclude_none=True) for s in states]}


@spec_step(ServiceOrderSpec)
async def check_order(ctx: StepContext[ServiceOrderSpec]) -> Mapping[str, Any]:
    """Init -> Running: the checks of the webhook again."""
    problems = order_problems(ctx.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    return {}


def _refusal(error: ApiError) -> bool:
    """A refusal of the write itself (an outage, status 0 or 5xx/429, is retried instead)."""
    return error.status in REFUSED_STATUSES


async def _write(objects: Objects, namespace: str, order: str, item: OrderItem, status: OrderItemStatus,
                 now: str) -> OrderItemStatus:
    """Write one item (create, patch or delete its instance): the item in progress at the generation written,
    or failed with the answer that refused it. An outage is raised (the step is retried)."""
    mark = f"{order}/{item.id}"
    try:
        if item.action == "create":
            body = {"apiVersion": API_VERSION, "kind": SERVICE_INSTANCE.kind,
                    "metadata": {"name": item.instance, "namespace": namespace,
                                 "annotations": {ORDER_ANNOTATION: mark}},
                    "spec": {"entity": item.entity, "attributes": dict(item.attributes or {})}}
            try:
                written = await objects.create(SERVICE_INSTANCE, namespace, body)
            except ApiError as error:
                existing = await objects.find(SERVICE_INSTANCE, namespace, item.instance) \
                    if error.status == 409 else None
                if existing is None or ((existing.get("metadata") or {}).get("annotations") or {}).get(
                        ORDER_ANNOTATION) != mark:
                    raise
                written = existing  # ours: created before a status write was lost
        elif item.action == "update":
            found = await objects.find(SERVICE_INSTANCE, namespace, item.instance)
            if found is None:
                return status.model_copy(update={"state": "failed", "failure_type": "Gone", "time": now,
                                                 "message": f"no instance {item.instance} to update"})
            old = dict((found.get("spec") or {}).get("attributes") or {})
            new = {k: v for k, v in {**old, **(item.attributes or {})}.items() if v is not None}
            spec: dict[str, Any] = {"attributes": merge_ready(old, new)}
            version = (found.get("status") or {}).get("version")
            if version:
                spec["currentVersion"] = version
            written = await objects.patch(SERVICE_INSTANCE, namespace, item.instance,
                                          {"metadata": {"annotations": {ORDER_ANNOTATION: mark}}, "spec": spec})
        else:
            try:
                await objects.delete(SERVICE_INSTANCE, namespace, item.instance)
            except ApiError as error:
                if error.status != 404:
                    raise
                return status.model_copy(update={"state": "failed", "failure_type": "Gone", "time": now,
                                                 "message": f"no instance {item.instance} to delete"})
            return status.model_copy(update={"state": "in_progress", "time": now,
                                             "message": f"instance {item.instance}: delete requested"})
    except ApiError as error:
        if not _refusal(error):
            raise TemporaryError("ApiUnavailable", f"item {item.id}: {error.message}", delay=5.0) from None
        return status.model_copy(update={"state": "failed", "failure_type": "Refused", "time": now,
                                         "message": f"{item.action} of instance {item.instance} refused: "
                                                    f"{error.message}"})
    generation = int((written.get("metadata") or {}).get("generation") or 1)
    return status.model_copy(update={"state": "in_progress", "generation": generation, "time": now,
                                     "message": f"instance {item.instance}: {item.action} sent"})


@spec_step(ServiceOrderSpec)
async def run_order(ctx: StepContext[ServiceOrderSpec]) -> Mapping[str, Any]:
    """Running -> Provisioned: read the items in progress off their instances, skip the dependents of failed
    items, start the items whose dependencies completed; until every item ended."""
    obj, spec = ctx.obj, ctx.spec
    objects = Objects(ctx.services.kube)
    now = utc_now()
    before = _items(obj.status)
    states = dict(before)
    by_id = {item.id: item for item in spec.items}
    for item_id, status in list(states.items()):
        item = by_id.get(item_id)
        if item is None or status.state != "in_progress":
            continue
        try:
            found = await objects.find(SERVICE_INSTANCE, obj.namespace, item.instance)
        except ApiError as error:
            raise TemporaryError("ApiUnavailable", f"item {item.id}: {error.message}", delay=5.0) from None
        outcome = item_outcome(item, status, found, now)
        if outcome is not None:
            states[item_id] = outcome
    while True:  # a write refused at once can skip its dependents, which can let nothing else start
        step = advance_order(spec, states, now)
        states = {s.id: s for s in step.items}
        if not step.start:
            break
        for item in step.start:
            states[item.id] = await _write(objects, obj.namespace, obj.name, item, states[item.id], now)
    ordered = [states[item.id] for item in spec.items]
    _record(ctx, before, ordered)
    result = step.result
    facts = _facts(ordered, result)
    if result == "in_progress":
        running = [s.id for s in ordered if s.state == "in_progress"]
        waiting = [s.id for s in ordered if s.state == "waiting"]
        raise TemporaryError("InProgress", f"in progress: {', '.join(running) or 'none'}; waiting for their "
                             f"dependencies: {', '.join(waiting) or 'none'}", delay=POLL_SECONDS, facts=facts,
                             waiting=True)
    if result == "completed":
        return facts
    failed = [s for s in ordered if s.state in TERMINAL - {"completed"}]
    raise PermanentError("OrderFailed" if result == "failed" else "OrderPartial",
                         f"{len(ordered) - len(failed)} of {len(ordered)} items completed: {summary(ordered)}",
                         facts=facts, phase="Failed" if result == "failed" else "Partial")


def _record(ctx: StepContext[ServiceOrderSpec], before: Mapping[str, OrderItemStatus],
            after: list[OrderItemStatus]) -> None:
    """One Event per item that changed state."""
    if ctx.services is None:
        return
    for status in after:
        old = before.get(status.id)
        if (old.state if old is not None else "waiting") == status.state:
            continue
        bad = status.state in ("failed", "skipped")
        ctx.services.events.record(ctx.obj, "Warning" if bad else "Normal", "Item",
                                   f"item {status.id}: {status.state}" + (f": {status.message}" if status.message
                                                                           else ""))
