"""The service inventory API's handlers (`InventoryApi`) and its routes, declared once (see the package)."""

from __future__ import annotations

import re
import secrets
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from pydantic import ValidationError

from operators import API_VERSION
from operators.lsm.api.openapi import (
    DIFF,
    INSTANCE,
    INSTANCES,
    INVENTORY,
    MIGRATE,
    ONE_ORDER,
    ORDER,
    ORDERS,
    PREFIX,
    SCHEMAS,
    STATE,
)
from operators.lsm.api.orders import create_order, get_order, list_orders
from operators.lsm.api.views import metadata_of, pending, snake, version_of, view
from operators.lsm.attributes import identity_value
from operators.lsm.machine import LifecycleError, Refused
from operators.lsm.models import (
    SERVICE_ENTITY,
    SERVICE_INSTANCE,
    LifecycleSpec,
    Migration,
    ServiceEntitySpec,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
    StateRequest,
)
from operators.lsm.paging import QueryError, page
from operators.lsm.related import relation_graph
from operators.lsm.triggers import check_delete, check_migration, check_request
from operators.lsm.versions import instance_version
from operators.lsm.wire import merge_ready, read_instance_status
from operators.lsm.world import Unresolved, World, find_lifecycle, resolve
from operators.runtime import (
    Access,
    ApiError,
    ApiProblem,
    Authenticator,
    Call,
    ExtensionBase,
    ExtensionSettings,
    Operation,
    Requester,
    Response,
    Route,
    RouteTable,
    StoredRecord,
    bad_request,
    custom_path,
    json_body,
    json_response,
    not_found,
    object_name_ok,
    passed_on,
)

RESOURCE = SERVICE_INSTANCE.plural
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MERGE_PATCH = "application/merge-patch+json"


class _NoStore:
    """The API reads what it resolves from the API server (it has no local store of Provisioned objects)."""

    def get(self, key: str) -> StoredRecord | None:
        return None

    def items(self, kind: str) -> Any:
        return iter(())


class _Services:
    def __init__(self, kube: Requester) -> None:
        self.kube = kube
        self.store = _NoStore()




def _data(value: Any, status: int = 200) -> Response:
    """Inmanta's envelope: every answer but an error is ``{"data": ...}``."""
    return json_response({"data": value}, status=status)


def _current_version(call: Call, body: Mapping[str, Any] | None = None, *, required: bool = False) -> int | None:
    """`current_version` from the body, else the query (`?current_version=`)."""
    raw: Any = None
    where = "body.current_version"
    if body is not None and body.get("current_version") is not None:
        raw = body["current_version"]
    elif "current_version" in call.query:
        raw, where = call.query["current_version"], "query parameter current_version"
    if raw is None:
        if required:
            bad_request("current_version: required (the instance's version you saw; a stale one is refused with 409)")
        return None
    if isinstance(raw, bool) or not (isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit())) \
            or int(raw) < 1:
        bad_request(f"{where}: expected a positive integer, got {raw!r}")
    return int(raw)


def _stale(given: int | None, obj: Mapping[str, Any]) -> None:
    """409 with Inmanta's message when `given` is not the instance's version."""
    actual = version_of(obj)
    if given is not None and given != actual:
        raise ApiProblem(409, "StaleVersion", f"The given current version ({given}) doesn't match the actual current "
                                              f"version ({actual}) of service instance {metadata_of(obj).get('name')}")


def _refused(refusal: Refused) -> NoReturn:
    raise ApiProblem(refusal.code, refusal.reason, refusal.message)


class InventoryApi(ExtensionBase):
    """The handlers, over the API server's client (the operator's credentials) and the authenticator that
    checks callers (their permissions are reviewed per request)."""

    resource = RESOURCE

    def __init__(self, kube: Requester, authenticator: Authenticator, default_namespace: str = "default",
                 settings: ExtensionSettings | None = None) -> None:
        super().__init__(kube, authenticator, default_namespace, settings)
        self.services = _Services(kube)

    # --- the extension ------------------------------------------------------------------------

    def declared(self) -> RouteTable:
        return ROUTES

    # --- plumbing -----------------------------------------------------------------------------

    async def _request(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        try:
            return await self.kube.request(method, path, body, **options)
        except ApiError as error:
            if error.status == 404:
                return None
            passed_on(error, f"{method} {path}", "service_instance")

    async def _entity(self, call: Call, namespace: str, name: str) -> ServiceEntitySpec:
        """The entity of the path, or 404; the 404 names the entities there are only to a caller who may list
        them. Called once the caller's permission on the instances is checked (`_admit`): before that, a 404
        here would tell anyone which entities exist in any namespace."""
        body = await self._request("GET", custom_path(SERVICE_ENTITY.plural, namespace, name)) \
            if object_name_ok(name) else None
        if body is None:
            known = ""
            if await self.authenticator.authorize(call.identity, Access("list", SERVICE_ENTITY.plural, namespace)):
                listed = await self._request("GET", custom_path(SERVICE_ENTITY.plural, namespace)) or {}
                names = sorted(str(metadata_of(i).get("name")) for i in listed.get("items") or [])
                known = f" (service entities here: {', '.join(names) or 'none'})"
            not_found("service_entity", f'service entity "{name}" not found in namespace "{namespace}"{known}')
        try:
            return ServiceEntitySpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError:
            raise ApiProblem(409, "EntityInvalid", f'service entity "{name}" has an invalid spec: see its status '
                                                   "(kubectl describe se)") from None

    async def _admit(self, call: Call, verb: str, namespace: str) -> None:
        """The caller may `verb` service instances in the namespace, before anything is looked up: on the
        instance the path names when `<id>` can be its name (a Role limited by `resourceNames` is honoured),
        else on all of them. `_find` checks again on the instance found."""
        ident = call.params["id"]
        await self.authorize(call, verb, namespace, ident if "=" not in ident and object_name_ok(ident) else "")

    async def _instances(self, namespace: str, entity: str) -> list[dict[str, Any]]:
        listed = await self._request("GET", custom_path(SERVICE_INSTANCE.plural, namespace)) or {}
        items = [i for i in listed.get("items") or [] if (i.get("spec") or {}).get("entity") == entity]
        return sorted(items, key=lambda i: (str(metadata_of(i).get("creationTimestamp") or ""),
                                            str(metadata_of(i).get("name"))))

    async def _find(self, call: Call, verb: str, namespace: str, entity_name: str, entity: ServiceEntitySpec
                    ) -> dict[str, Any]:
        """The instance `<id>` names, the caller allowed `verb` on it; 404 saying what was looked for."""
        ident = call.params["id"]
        found: dict[str, Any] | None = None
        attribute, equals, value = ident.partition("=")
        if equals:
            if attribute != entity.identity:
                await self.authorize(call, verb, namespace)
                why = (f"its identity attribute is {entity.identity!r}" if entity.identity
                       else "it has no identity attribute")
                not_found("service_instance", f"{ident!r}: {attribute!r} is not the service identity of service "
                                               f'entity "{entity_name}" ({why}); use the uid, the name, or '
                                               "<identity>=<value>")
            found = next((i for i in await self._instances(namespace, entity_name)
                          if _identity(entity, i) == value), None)
        else:
            if object_name_ok(ident):
                found = await self._request("GET", custom_path(SERVICE_INSTANCE.plural, namespace, ident))
            if found is None and _UID.fullmatch(ident):
                found = next((i for i in await self._instances(namespace, entity_name)
                              if metadata_of(i).get("uid") == ident), None)
        if found is None:
            await self.authorize(call, verb, namespace)
            not_found("service_instance", f'no service instance {ident!r} of service entity "{entity_name}" in '
                                           f'namespace "{namespace}" (looked for a uid, a name and '
                                           f"<identity>=<value>)")
        await self.authorize(call, verb, namespace, str(metadata_of(found).get("name")))
        other = (found.get("spec") or {}).get("entity")
        if other != entity_name:
            not_found("service_instance", f'service instance {metadata_of(found).get("name")} is an instance of '
                                           f'service entity "{other}", not of "{entity_name}"')
        return found

    async def _world(self, namespace: str, name: str, entity: str, version: int | None = None) -> World | None:
        """The instance's world (at entity version `version`, None: the current one) as the admission webhook
        resolves it; None when it cannot be (the webhook then lets the write through too, and the pipeline shows
        why it waits)."""
        try:
            return await resolve(self.services, namespace, name, entity, lenient=True, version=version)
        except Unresolved as error:
            if error.reason == "EntityVersionNotFound":
                raise ApiProblem(422, error.reason, error.message) from None
            return None

    async def _lifecycle(self, namespace: str, entity: ServiceEntitySpec,
                         shown: Sequence[Mapping[str, Any]]) -> LifecycleSpec | None:
        """The entity's lifecycle, looked up only when an instance shown is pending creation (see `view`)."""
        if not any(pending(obj) for obj in shown):
            return None
        try:
            return await find_lifecycle(self.services, namespace, entity.lifecycle, lenient=True)
        except Unresolved:
            return None

    async def _check(self, world: World | None, spec: ServiceInstanceSpec, status: ServiceInstanceStatus,
                     old_spec: ServiceInstanceSpec | None) -> None:
        if world is None:
            return
        try:
            await check_request(world, spec, status, old_spec)
        except Refused as refusal:
            _refused(refusal)
        except LifecycleError:
            return  # the lifecycle's problem, not the request's: the pipeline shows it

    # --- handlers -----------------------------------------------------------------------------

    async def list(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "list", namespace)
        name = call.params["entity"]
        entity = await self._entity(call, namespace, name)
        query: dict[str, list[str]] = {}
        for key, value in urllib.parse.parse_qsl(call.request.query, keep_blank_values=True):
            query.setdefault(key, []).append(value)
        query.pop("current_version", None)
        found = await self._instances(namespace, name)
        lifecycle = await self._lifecycle(namespace, entity, found)
        graph = await relation_graph(self.services, namespace)
        try:
            return json_response(page([view(i, entity.config, lifecycle, graph) for i in found], query,
                                      call.request.path, entity.identity))
        except QueryError as error:
            bad_request(str(error))

    async def get(self, call: Call) -> Response:
        namespace = self.namespace(call)
        name = call.params["entity"]
        await self._admit(call, "get", namespace)
        entity = await self._entity(call, namespace, name)
        found = await self._find(call, "get", namespace, name, entity)
        _stale(_current_version(call), found)
        return _data(view(found, entity.config, await self._lifecycle(namespace, entity, [found]),
                          await relation_graph(self.services, namespace)))

    async def diff(self, call: Call) -> Response:
        """What the instance's waiting candidate set would change (`status.diff`), or what its promotion changed;
        `{"data": null}` when no candidate set ever waited."""
        namespace = self.namespace(call)
        name = call.params["entity"]
        await self._admit(call, "get", namespace)
        entity = await self._entity(call, namespace, name)
        found = await self._find(call, "get", namespace, name, entity)
        diff = (found.get("status") or {}).get("diff")
        if not diff:
            return _data(None)
        return _data({"id": metadata_of(found).get("uid"), "name": _name(found), "instance_version": version_of(found),
                      **{snake(k): v for k, v in diff.items()}})

    async def create(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "create", namespace)
        entity_name = call.params["entity"]
        body = json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object {attributes, service_instance_id?, name?}")
        attributes = body.get("attributes", {})
        if not isinstance(attributes, dict):
            bad_request("body.attributes: expected a JSON object")
        entity = await self._entity(call, namespace, entity_name)
        name = _instance_name(body, entity, entity_name, attributes)
        spec = ServiceInstanceSpec(entity=entity_name, attributes=attributes)
        world = await self._world(namespace, name, entity_name)
        await self._check(world, spec, ServiceInstanceStatus(), None)
        obj = {"apiVersion": API_VERSION, "kind": SERVICE_INSTANCE.kind,
               "metadata": {"name": name, "namespace": namespace},
               "spec": spec.model_dump(by_alias=True, mode="json", exclude_none=True)}
        try:
            created = await self.caller(call).request("POST", custom_path(SERVICE_INSTANCE.plural, namespace), obj)
        except ApiError as error:
            if error.status == 409:
                raise ApiProblem(409, "AlreadyExists", f'service instance "{name}" exists already in namespace '
                                                       f'"{namespace}": {error.message}') from None
            passed_on(error, f"creating service instance {name}", "service_instance")
        return _data(view(created, entity.config, world.lifecycle if world is not None else None), status=201)

    async def update(self, call: Call) -> Response:
        namespace = self.namespace(call)
        entity_name = call.params["entity"]
        body = json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object {current_version, attributes}")
        edits = body.get("attributes")
        if not isinstance(edits, dict):
            bad_request("body.attributes: required, a JSON object of the attributes to change (null removes one)")
        current_version = _current_version(call, body, required=True)
        await self._admit(call, "update", namespace)
        entity = await self._entity(call, namespace, entity_name)
        found = await self._find(call, "update", namespace, entity_name, entity)
        _stale(current_version, found)
        old_spec = _spec(found)
        attributes = {k: v for k, v in {**old_spec.attributes, **edits}.items() if v is not None}
        spec = old_spec.model_copy(update={"attributes": attributes, "current_version": current_version})
        status = read_instance_status(found.get("status") or {})
        await self._check(await self._world(namespace, _name(found), entity_name, instance_version(spec, status)),
                          spec, status, old_spec)
        patch = {"metadata": {"resourceVersion": metadata_of(found).get("resourceVersion")},
                 "spec": {"attributes": merge_ready(old_spec.attributes, attributes),
                          "currentVersion": current_version}}
        return await self._patch(call, namespace, found, patch, entity.config, "updating")

    async def set_state(self, call: Call) -> Response:
        namespace = self.namespace(call)
        entity_name = call.params["entity"]
        body = json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object {current_version, target_state, message?}")
        target = body.get("target_state", body.get("target"))
        if not isinstance(target, str) or not target:
            bad_request("body.target_state: required, the name of a state")
        message = body.get("message")
        if message is not None and not isinstance(message, str):
            bad_request("body.message: expected a string")
        current_version = _current_version(call, body, required=True)
        assert current_version is not None
        await self._admit(call, "update", namespace)
        entity = await self._entity(call, namespace, entity_name)
        found = await self._find(call, "update", namespace, entity_name, entity)
        _stale(current_version, found)
        old_spec = _spec(found)
        try:
            request = StateRequest(target=target, current_version=current_version, message=message)
        except ValidationError as error:
            bad_request("; ".join(f"body: {e['msg']}" for e in error.errors()))
        spec = old_spec.model_copy(update={"state_request": request})
        status = read_instance_status(found.get("status") or {})
        await self._check(await self._world(namespace, _name(found), entity_name, instance_version(spec, status)),
                          spec, status, old_spec)
        patch = {"metadata": {"resourceVersion": metadata_of(found).get("resourceVersion")},
                 "spec": {"stateRequest": request.model_dump(by_alias=True, mode="json")}}
        return await self._patch(call, namespace, found, patch, entity.config, "setting the state of")

    async def migrate(self, call: Call) -> Response:
        """Move the instance to another entity version: written to spec.entityVersion and spec.migration (the
        operator takes it in); its sets are validated under that version first, refused naming what fails."""
        namespace = self.namespace(call)
        entity_name = call.params["entity"]
        body = json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object {current_version, target_entity_version, state, attributes?, "
                        "remove?, message?}")
        target_version = body.get("target_entity_version")
        if not isinstance(target_version, int) or isinstance(target_version, bool) or target_version < 1:
            bad_request("body.target_entity_version: required, an entity version (an integer from 1)")
        current_version = _current_version(call, body, required=True)
        try:
            migration = Migration.model_validate({
                "targetState": body.get("state", body.get("target_state")), "currentVersion": current_version,
                **{key: body[key] for key in ("attributes", "remove", "message") if body.get(key) is not None}})
        except ValidationError as error:
            bad_request("; ".join(f"body.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
        await self._admit(call, "update", namespace)
        entity = await self._entity(call, namespace, entity_name)
        found = await self._find(call, "update", namespace, entity_name, entity)
        _stale(current_version, found)
        old_spec = _spec(found)
        spec = old_spec.model_copy(update={"entity_version": target_version, "migration": migration})
        status = read_instance_status(found.get("status") or {})
        source = await self._world(namespace, _name(found), entity_name, instance_version(old_spec, status))
        target = await self._world(namespace, _name(found), entity_name, target_version)
        if source is not None and target is not None:
            try:
                check_migration(source, target, spec, status)
            except Refused as refusal:
                _refused(refusal)
        wire = migration.model_dump(by_alias=True, mode="json", exclude_defaults=True)
        old = old_spec.migration.model_dump(by_alias=True, mode="json", exclude_defaults=True) if old_spec.migration \
            else {}
        patch = {"metadata": {"resourceVersion": metadata_of(found).get("resourceVersion")},
                 "spec": {"entityVersion": target_version, "migration": merge_ready(old, wire)}}
        return await self._patch(call, namespace, found, patch, entity.config, "migrating")

    async def delete(self, call: Call) -> Response:
        namespace = self.namespace(call)
        entity_name = call.params["entity"]
        current_version = _current_version(call)
        await self._admit(call, "delete", namespace)
        entity = await self._entity(call, namespace, entity_name)
        found = await self._find(call, "delete", namespace, entity_name, entity)
        _stale(current_version, found)
        world = await self._world(namespace, _name(found), entity_name,
                                  read_instance_status(found.get("status") or {}).entity_version)
        if world is not None and not metadata_of(found).get("deletionTimestamp"):
            try:
                await check_delete(world, read_instance_status(found.get("status") or {}), current_version)
            except Refused as refusal:
                _refused(refusal)
            except LifecycleError:
                pass
        meta = metadata_of(found)
        options = {"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
        try:
            deleted = await self.caller(call).request(
                "DELETE", custom_path(SERVICE_INSTANCE.plural, namespace, _name(found)), options)
        except ApiError as error:
            passed_on(error, f"deleting service instance {_name(found)}", "service_instance")
        shown = deleted if isinstance(deleted, dict) and deleted.get("kind") == SERVICE_INSTANCE.kind else found
        return _data(view(shown, entity.config))

    async def _patch(self, call: Call, namespace: str, found: Mapping[str, Any], patch: Mapping[str, Any],
                     config: Mapping[str, Any], doing: str) -> Response:
        name = _name(found)
        try:
            patched = await self.caller(call).request(
                "PATCH", custom_path(SERVICE_INSTANCE.plural, namespace, name), patch, content_type=MERGE_PATCH)
        except ApiError as error:
            if error.status == 409:
                raise ApiProblem(409, "Conflict", f"service instance {name} changed while {doing} it (the operator "
                                                  "or another client wrote it): read it again and retry with its "
                                                  "current version") from None
            passed_on(error, f"{doing} service instance {name}", "service_instance")
        return _data(view(patched, config))


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name"))


def _spec(obj: Mapping[str, Any]) -> ServiceInstanceSpec:
    try:
        return ServiceInstanceSpec.model_validate(dict(obj.get("spec") or {}))
    except ValidationError:
        raise ApiProblem(409, "InvalidSpec", f"service instance {_name(obj)} has an invalid spec: see its status "
                                             "(kubectl describe si)") from None


def _identity(entity: ServiceEntitySpec, obj: Mapping[str, Any]) -> str | None:
    status = obj.get("status") or {}
    value = status.get("identity") or identity_value(entity, (obj.get("spec") or {}).get("attributes"))
    return None if value is None else str(value)


def _instance_name(body: Mapping[str, Any], entity: ServiceEntitySpec, entity_name: str,
                   attributes: Mapping[str, Any]) -> str:
    """The object's name: `name`, else `service_instance_id` (Inmanta's client-chosen id), else the identity
    value when it makes a name, else `<entity>-<random>`."""
    for key in ("name", "service_instance_id"):
        given = body.get(key)
        if given is not None:
            if not isinstance(given, str) or not object_name_ok(given):
                bad_request(f"body.{key}: {given!r} is not a valid object name (lowercase letters, digits, '-' "
                            "and '.', at most 253)")
            return given
    identity = identity_value(entity, attributes)
    if identity is not None and object_name_ok(str(identity)):
        return str(identity)
    return f"{entity_name[:240]}-{secrets.token_hex(4)}"


ROUTES = RouteTable((
    Route(INVENTORY, {
        "GET": Operation(InventoryApi.list, "list the service instances of an entity (?namespace=NS)",
                         INSTANCES["get"]),
        "POST": Operation(InventoryApi.create, "create a service instance: {attributes, service_instance_id? or "
                          "name?}", INSTANCES["post"])},
          parameters=INSTANCES["parameters"]),
    Route(INVENTORY + "/{id}", {
        "GET": Operation(InventoryApi.get, "one instance (id: uid, name or <identity>=<value>); ?current_version=N: "
                         "409 if stale", INSTANCE["get"]),
        "PATCH": Operation(InventoryApi.update, "update: {current_version, attributes: {changed keys; null "
                           "removes}}", INSTANCE["patch"]),
        "DELETE": Operation(InventoryApi.delete, "delete (?current_version=N); the lifecycle's delete path runs",
                            INSTANCE["delete"])},
          parameters=INSTANCE["parameters"]),
    Route(INVENTORY + "/{id}/diff", {"GET": Operation(
        InventoryApi.diff, "what the waiting candidate set would change: the state requests that approve it, the App "
                           "action, the attributes and App inputs that change (status.diff)", DIFF["get"])},
          parameters=DIFF["parameters"]),
    Route(INVENTORY + "/{id}/state", {"POST": Operation(
        InventoryApi.set_state, "request a state: {current_version, target_state, message?} (also "
                                f"{PREFIX}/services/{{entity}}/{{id}}/state)", STATE["post"])},
          parameters=STATE["parameters"]),
    Route(INVENTORY + "/{id}/update_entity_version", {"POST": Operation(
        InventoryApi.migrate, "move to another entity version: {current_version, target_entity_version, state, "
                              "attributes?, remove?, message?}", MIGRATE["post"])},
          parameters=MIGRATE["parameters"]),
    Route(PREFIX + "/services/{entity}/{id}/state", {"POST": Operation(InventoryApi.set_state, openapi=STATE["post"])},
          parameters=STATE["parameters"], description="The seed's spelling of .../state."),
    Route(ORDER, {
        "GET": Operation(list_orders, "the namespace's service orders", ORDERS["get"]),
        "POST": Operation(create_order, "create a service order: {service_order_items: [{instance_id, action, "
                          "service_entity?, attributes?/edits?, dependencies?, id?}], description?, name?}",
                          ORDERS["post"])},
          parameters=ORDERS["parameters"]),
    Route(ORDER + "/{id}", {"GET": Operation(get_order, "one service order (name or uid): items' states, its state",
                                             ONE_ORDER["get"])},
          parameters=ONE_ORDER["parameters"]),
), SCHEMAS)
"""The inventory's routes, declared once (`operators.runtime.api.routes`)."""
ROUTE_DOCS = ROUTES.docs()
