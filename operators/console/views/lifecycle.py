"""The console's ServiceInstance routes (issue 29): the page's data and its three actions, as the user.

Thin: every read and write goes to the API server with the user's token (`call.kube`), so RBAC decides;
the shaping is `lifecycle_view` (pure). An action is checked against what the instance allows now, at the
version the user saw, before it is sent; the admission webhook checks it again (a request that raced
another is refused there with the lifecycle's own message, which the page shows).

    GET  /console/api/lifecycle/{namespace}/{name}          the page (diagram, path, actions, diff)
    POST /console/api/lifecycle/{namespace}/{name}/update   {attributes: {name: text}, currentVersion}
    POST /console/api/lifecycle/{namespace}/{name}/state    {target, currentVersion, message?}
    POST /console/api/lifecycle/{namespace}/{name}/delete   {currentVersion}

Each answers the page as the write left the instance. The lifecycle is the entity's: a Lifecycle of the
namespace, a ClusterLifecycle, or a built-in one (its ClusterLifecycle when the user may read it, else
Stead's own copy, as the operator does when it is not installed). A lifecycle the user may not read is
no diagram and no action, with the reason; the instance itself unreadable is the API server's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from operators.console.views.lifecycle_view import (
    Invalid,
    allowed_actions,
    busy,
    check_version,
    instance_page,
    offered,
    read_instance,
    state_patch,
    update_patch,
)
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute
from operators.lsm.builtin import BUILTINS, object_name
from operators.lsm.models import (
    CLUSTER_LIFECYCLE,
    LIFECYCLE,
    SERVICE_ENTITY,
    SERVICE_INSTANCE,
    LifecycleSpec,
    ServiceEntitySpec,
)
from operators.runtime import ApiError, custom_path

MERGE_PATCH = "application/merge-patch+json"
BASE = "/console/api/lifecycle/{namespace}/{name}"


class _World:
    """An instance with its entity and lifecycle, as the user may read them."""

    def __init__(self, obj: Mapping[str, Any], entity: ServiceEntitySpec | None, lifecycle: LifecycleSpec | None,
                 problem: str | None) -> None:
        self.obj, self.entity, self.lifecycle, self.problem = obj, entity, lifecycle, problem

    def page(self, obj: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return instance_page(obj or self.obj, self.lifecycle, self.entity, self.problem)


async def _get(call: ConsoleCall, path: str) -> dict[str, Any] | None:
    """An object, or None when it does not exist or the user may not read it (RBAC: show nothing)."""
    try:
        return await call.kube.request("GET", path)
    except ApiError as error:
        if error.status in (403, 404):
            return None
        raise


async def _lifecycle(call: ConsoleCall, namespace: str, entity: ServiceEntitySpec) -> LifecycleSpec | None:
    ref = entity.lifecycle
    if ref.builtin is not None:
        found = await _get(call, custom_path(CLUSTER_LIFECYCLE.plural, None, object_name(ref.builtin)))
        return BUILTINS[ref.builtin] if found is None else LifecycleSpec.model_validate(found.get("spec") or {})
    if ref.cluster is not None:
        found = await _get(call, custom_path(CLUSTER_LIFECYCLE.plural, None, ref.cluster))
    else:
        found = await _get(call, custom_path(LIFECYCLE.plural, namespace, ref.name))
    return None if found is None else LifecycleSpec.model_validate(found.get("spec") or {})


async def _world(call: ConsoleCall) -> _World:
    namespace, name = call.params["namespace"], call.params["name"]
    obj = await call.kube.request("GET", custom_path(SERVICE_INSTANCE.plural, namespace, name))
    entity_name = str((obj.get("spec") or {}).get("entity"))
    found = await _get(call, custom_path(SERVICE_ENTITY.plural, namespace, entity_name))
    if found is None:
        return _World(obj, None, None, f"the ServiceEntity {entity_name} cannot be read (absent, or not allowed)")
    try:
        entity = ServiceEntitySpec.model_validate(found.get("spec") or {})
        lifecycle = await _lifecycle(call, namespace, entity)
    except ValidationError:
        return _World(obj, None, None, f"the ServiceEntity {entity_name} or its lifecycle is not valid: see its "
                                       "conditions")
    problem = None if lifecycle is not None else (
        f"the lifecycle {entity.lifecycle.key} of ServiceEntity {entity_name} cannot be read (absent, or not allowed)")
    return _World(obj, entity, lifecycle, problem)


def _body(call: ConsoleCall) -> Mapping[str, Any]:
    if not isinstance(call.body, Mapping):
        raise ConsoleError(422, "body: expected a JSON object")
    return call.body


async def _act(call: ConsoleCall, kind: str) -> dict[str, Any]:
    """Check the action against the instance as it is now, then send it as the user."""
    world = await _world(call)
    body = _body(call)
    meta = world.obj.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    try:
        spec, status = read_instance(world.obj)
        if world.lifecycle is None:
            raise Invalid(409, f"no action without the lifecycle: {world.problem}")
        waiting = busy(spec, status, meta.get("generation"))
        if waiting is not None:
            raise Invalid(409, f"{waiting}: wait for it before asking again")
        actions = allowed_actions(world.lifecycle, status, deleting=bool(meta.get("deletionTimestamp")),
                                  entity=world.entity)
        path = custom_path(SERVICE_INSTANCE.plural, namespace, name)
        if kind == "delete":
            offered(actions, "delete")
            if status.state is not None:
                check_version(body.get("currentVersion"), status, name)
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta.get("uid")}}
            answer = await call.kube.request("DELETE", path, options)
            gone = answer if answer.get("kind") == SERVICE_INSTANCE.kind else world.obj
            return world.page(gone)
        version = check_version(body.get("currentVersion"), status, name)
        if kind == "update":
            offered(actions, "update")
            patch = update_patch(world.entity, spec, body.get("attributes"), version)
        else:
            target = body.get("target")
            offered(actions, "set-state", str(target))
            patch = state_patch(target, version, body.get("message"))
    except Invalid as refused:
        raise ConsoleError(refused.status, refused.message) from None
    return world.page(await call.kube.request("PATCH", path, patch, content_type=MERGE_PATCH))


async def page(call: ConsoleCall) -> Any:
    return (await _world(call)).page()


async def update(call: ConsoleCall) -> Any:
    return await _act(call, "update")


async def set_state(call: ConsoleCall) -> Any:
    return await _act(call, "set-state")


async def delete(call: ConsoleCall) -> Any:
    return await _act(call, "delete")


ROUTES: tuple[ConsoleRoute, ...] = (
    ConsoleRoute("GET", BASE, page),
    ConsoleRoute("POST", BASE + "/update", update),
    ConsoleRoute("POST", BASE + "/state", set_state),
    ConsoleRoute("POST", BASE + "/delete", delete),
)
