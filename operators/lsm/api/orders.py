"""The inventory API's service orders, in Inmanta's shape: `POST /lsm/v2/order` creates a ServiceOrder object
(so the order lives in the API server, and in git, like everything else), `GET /lsm/v2/order/<id>` shows it.

A body is Inmanta's: `{"service_order_items": [{"instance_id", "action", "service_entity"?, "attributes"?,
"edits"?, "dependencies"?, "id"?}], "description"?, "name"?}`. An item's `instance_id` is the instance's
name (the order's namespace); its `id` (what `dependencies` name) defaults to the instance's name;
`edits` is what an update changes (`attributes` is taken too). The ServiceOrder's own checks (the webhook's:
cycles, unknown dependencies) run before anything is written, and the caller must be allowed the verb of
each item on `serviceinstances` (create, patch, delete) as well as `create` on `serviceorders` (the write
impersonates the caller): an order is never a way around the instances' RBAC.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from operators import API_VERSION
from operators.lsm.models import SERVICE_ORDER, ServiceOrderSpec
from operators.lsm.order_rights import ACTION_VERBS
from operators.lsm.orders import order_problems
from operators.runtime import (
    ApiError,
    ApiProblem,
    Call,
    Response,
    bad_request,
    custom_path,
    json_body,
    json_response,
    not_found,
    object_name_ok,
    passed_on,
)

if TYPE_CHECKING:
    from operators.lsm.api.handlers import InventoryApi

ORDERS = SERVICE_ORDER.plural
VERBS = ACTION_VERBS
"""The verb on serviceinstances each action needs of the caller: the one the API server's policy asks for an
order created with kubectl (update: `patch`, the operator's request), so both paths judge alike."""


def order_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ServiceOrder as Inmanta shows an order: its items with their status, and the order's state."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    states = {s.get("id"): s for s in status.get("items") or []}
    items = []
    for item in spec.get("items") or []:
        state = states.get(item.get("id")) or {}
        items.append({"id": item.get("id"), "instance_id": item.get("instance"), "action": item.get("action"),
                      "service_entity": item.get("entity"), "attributes": item.get("attributes"),
                      "dependencies": list(item.get("dependencies") or []),
                      "status": {"state": state.get("state", "waiting"), "failure_type": state.get("failureType"),
                                 "reason": state.get("message")}})
    return {"id": meta.get("uid"), "name": meta.get("name"), "namespace": meta.get("namespace"),
            "environment": meta.get("namespace"), "description": spec.get("description"),
            "created_at": meta.get("creationTimestamp"),
            "status": {"state": status.get("result") or "acknowledged", "phase": status.get("phase")},
            "service_order_items": items, "conditions": list(status.get("conditions") or [])}


def _item(raw: Any, index: int) -> dict[str, Any]:
    """One of Inmanta's order items as a ServiceOrder item (camelCase spec)."""
    where = f"body.service_order_items[{index}]"
    if not isinstance(raw, dict):
        bad_request(f"{where}: expected a JSON object")
    instance = raw.get("instance_id", raw.get("instance"))
    if not isinstance(instance, str) or not object_name_ok(instance):
        bad_request(f"{where}.instance_id: required, the instance's name (a valid object name)")
    action = raw.get("action")
    if action not in VERBS:
        bad_request(f"{where}.action: expected create, update or delete, got {action!r}")
    attributes = raw.get("edits", raw.get("attributes"))
    out: dict[str, Any] = {"id": raw.get("id", instance), "action": action, "instance": instance}
    if raw.get("service_entity") is not None:
        out["entity"] = raw["service_entity"]
    if attributes is not None:
        out["attributes"] = attributes
    if raw.get("dependencies"):
        out["dependencies"] = raw["dependencies"]
    return out


async def create_order(api: InventoryApi, call: Call) -> Response:
    namespace = api.namespace(call)
    await api.authorize(call, "create", namespace, resource=ORDERS)
    body = json_body(call)
    if not isinstance(body, dict):
        bad_request("body: expected a JSON object {service_order_items, description?, name?}")
    raw_items = body.get("service_order_items")
    if not isinstance(raw_items, list) or not raw_items:
        bad_request("body.service_order_items: required, a non-empty list of items")
    name = body.get("name")
    if name is None:
        name = f"order-{secrets.token_hex(4)}"
    elif not isinstance(name, str) or not object_name_ok(name):
        bad_request(f"body.name: {name!r} is not a valid object name")
    spec_body: dict[str, Any] = {"items": [_item(raw, i) for i, raw in enumerate(raw_items)]}
    if body.get("description") is not None:
        spec_body["description"] = body["description"]
    try:
        spec = ServiceOrderSpec.model_validate(spec_body)
    except ValidationError as error:
        bad_request("; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    problems = order_problems(spec)
    if problems:
        raise ApiProblem(422, "InvalidOrder", "; ".join(problems))
    for verb in sorted({VERBS[item.action] for item in spec.items}):
        await api.authorize(call, verb, namespace)
    obj = {"apiVersion": API_VERSION, "kind": SERVICE_ORDER.kind, "metadata": {"name": name, "namespace": namespace},
           "spec": spec.model_dump(by_alias=True, mode="json", exclude_none=True)}
    try:
        created = await api.caller(call).request("POST", custom_path(ORDERS, namespace), obj)
    except ApiError as error:
        if error.status == 409:
            raise ApiProblem(409, "AlreadyExists", f'service order "{name}" exists already in namespace '
                                                   f'"{namespace}": {error.message}') from None
        passed_on(error, f"creating service order {name}", "service_order")
    return json_response({"data": order_view(created)}, status=201)


async def get_order(api: InventoryApi, call: Call) -> Response:
    namespace = api.namespace(call)
    ident = call.params["id"]
    await api.authorize(call, "get", namespace, ident if object_name_ok(ident) else "", resource=ORDERS)
    found: Any = None
    try:
        if object_name_ok(ident):
            found = await api.kube.request("GET", custom_path(ORDERS, namespace, ident))
    except ApiError as error:
        if error.status != 404:
            passed_on(error, f"reading service order {ident}", "service_order")
    if found is None:  # a uid: among the namespace's orders, for a caller who may list them
        await api.authorize(call, "list", namespace, resource=ORDERS)
        try:
            listed = await api.kube.request("GET", custom_path(ORDERS, namespace))
        except ApiError as error:
            passed_on(error, "listing service orders", "service_order")
        found = next((o for o in listed.get("items") or [] if (o.get("metadata") or {}).get("uid") == ident), None)
    if found is None:
        not_found("service_order", f'no service order {ident!r} in namespace "{namespace}" (looked for a name and '
                                   "a uid)")
    return json_response({"data": order_view(found)})


async def list_orders(api: InventoryApi, call: Call) -> Response:
    namespace = api.namespace(call)
    await api.authorize(call, "list", namespace, resource=ORDERS)
    try:
        listed = await api.kube.request("GET", custom_path(ORDERS, namespace))
    except ApiError as error:
        passed_on(error, "listing service orders", "service_order")
    items = sorted(listed.get("items") or [], key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp")))
    return json_response({"data": [order_view(o) for o in items]})
