"""The configuration store's routes (`ConfigStoreApi`, an extension of the API server) and `ConfigApi`, the
API server's handler with them first, as `stead operator` composes it."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from operators.config.api.bodies import component_spec, component_view, environment_spec, environment_view
from operators.config.api.openapi import (
    COMPONENT,
    COMPONENTS,
    ENVIRONMENT,
    ENVIRONMENTS,
    OVERRIDES_DESCRIPTION,
    SCHEMAS,
    VALUES_OPERATIONS,
    VALUES_PARAMETERS,
)
from operators.config.api.paths import PREFIX, ValuesPath, level_name, values_path
from operators.config.cache import PLURALS, cached_repository
from operators.config.history import Version
from operators.config.keys import KeyPathError, delete_key, get_key, parse_key, set_key
from operators.config.levels import (
    NODE_LEVEL,
    ROLE_LEVEL,
    LevelError,
    Point,
    canonical_point,
    complete_pairs,
    find_node,
    format_point,
    point_from_pairs,
    role_problem,
)
from operators.config.merge import Effective, Layer, effective, origin_of
from operators.config.models import ResourceDefinition, data_problems, resource_definition, unknown_resource_message
from operators.config.repository import (
    ConfigRepository,
    Conflict,
    Invalid,
    KubeConfigRepository,
    RepositoryError,
    Snapshot,
    StoredValues,
    Unavailable,
    ValuesTarget,
)
from operators.runtime import (
    ApiExtension,
    ApiHost,
    ApiProblem,
    Authenticator,
    Call,
    ExtensionSettings,
    HandlersBase,
    Operation,
    Requester,
    Response,
    Route,
    RouteTable,
    bad_request,
    dumps,
    flag,
    if_match,
    int_param,
    json_body,
    json_response,
    load_access,
    not_found,
    object_name_ok,
)

KEY_WRITE_ATTEMPTS = 5
K = TypeVar("K")
V = TypeVar("V")

log = logging.getLogger(__name__)


@dataclass
class _Derived:
    """What the API computed from one snapshot, kept for as long as the snapshot object lives.

    A repository serving from memory returns the same snapshot until something changes, so a
    Hiera backend asking the same lookups again (every Puppet run, every node) costs dictionary
    hits: `answers` holds encoded lookup answers by (decoded path, query as sent): a tuple, since a
    decoded path may hold a `?` that would make path and query ambiguous in one string.
    """

    effective: dict[tuple[str, Point], Effective] = field(default_factory=dict)
    resolved: dict[tuple[Any, ...], tuple[Point, ResourceDefinition]] = field(default_factory=dict)
    answers: dict[tuple[str, str], bytes] = field(default_factory=dict)


DERIVED_LIMIT = 10_000


def _remember(memo: dict[K, V], key: K, value: V) -> V:
    """Keep `value` under `key`, within DERIVED_LIMIT entries (crude, bounded: many distinct
    lookups against one snapshot cannot grow memory)."""
    if len(memo) >= DERIVED_LIMIT:
        memo.clear()
    memo[key] = value
    return value


class ConfigStoreApi(HandlersBase):
    """The handlers, over an injected repository and the authenticator that checks callers."""

    resource = "configvalues"

    def __init__(self, repository: ConfigRepository, authenticator: Authenticator,
                 default_namespace: str = "default", settings: ExtensionSettings | None = None,
                 kube: Requester | None = None) -> None:
        super().__init__(authenticator, default_namespace, settings)
        self.kube = kube  # for the cache `start` makes; None: the repository is all there is
        self.repository = repository
        self._derived: weakref.WeakKeyDictionary[Snapshot, _Derived] = weakref.WeakKeyDictionary()

    @classmethod
    def serving(cls, kube: Requester, authenticator: Authenticator, default_namespace: str,
                settings: ExtensionSettings) -> ConfigStoreApi:
        """The extension factory: reads go to the API server until `start` puts a watch-fed cache between."""
        return cls(KubeConfigRepository(kube), authenticator, default_namespace, settings, kube)

    async def start(self, stack: contextlib.AsyncExitStack) -> None:
        """Serve reads from a watch-fed cache (`operators.config.cache`) following the operator's watches when
        they see every object of the configuration kinds, else watches of its own."""
        if not self.settings.cache or self.kube is None:
            return
        watches = self.settings.watches
        shared = {p: watches[p] for p in PLURALS} if watches and set(PLURALS) <= set(watches) else None
        self.repository = await stack.enter_async_context(
            cached_repository(self.kube, load_access(self.settings.kubeconfig), shared))

    def declared(self) -> RouteTable:
        return ROUTES

    def problem_of(self, error: Exception) -> ApiProblem | None:
        """The configuration store's errors as answers."""
        if isinstance(error, Conflict):
            return ApiProblem(409, "Conflict", str(error))
        if isinstance(error, Invalid):
            return ApiProblem(400, "BadRequest", str(error))
        if isinstance(error, Unavailable):
            log.warning("configuration store unavailable: %s", error)
            return ApiProblem(503, "ServiceUnavailable", "the configuration store is unavailable; retry")
        if isinstance(error, RepositoryError):
            return ApiProblem(500, "InternalError", str(error))
        return None

    def _derived_from(self, snapshot: Snapshot) -> _Derived:
        derived = self._derived.get(snapshot)
        if derived is None:
            derived = self._derived[snapshot] = _Derived()
        return derived

    def _effective_at(self, snapshot: Snapshot, resource: str, point: Point) -> Effective:
        """Effective values, computed once per snapshot object, resource and point (a Hiera
        backend looks up keys one by one: the same merge would otherwise be redone per key)."""
        derived = self._derived_from(snapshot)
        result = derived.effective.get((resource, point))
        if result is None:
            result = _remember(derived.effective, (resource, point), effective(point, snapshot.layers(resource)))
        return result

    async def _authorize_write(self, call: Call, verb: str, namespace: str, stored: StoredValues | None) -> None:
        """A write of values, as RBAC sees it: `create` when no object holds them yet (a PUT that
        creates), else `verb` on that very object (by name)."""
        if stored is None:
            await self.authorize(call, "create", namespace, resource="configvalues")
        else:
            await self.authorize(call, verb, namespace, stored.name, resource="configvalues")

    # --- components and environments ---------------------------------------------------

    async def list_components(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "list", namespace, resource="configcomponents")
        components = await self.repository.list_components(namespace)
        return json_response([component_view(n, s) for n, s in sorted(components.items())])

    async def get_component(self, call: Call) -> Response:
        namespace = self.namespace(call)
        name = call.params["name"]
        await self.authorize(call, "get", namespace, name, resource="configcomponents")
        spec = (await self.repository.list_components(namespace)).get(name)
        if spec is None:
            not_found("component", f'component "{name}" not found in namespace "{namespace}"')
        return json_response(component_view(name, spec))

    async def create_component(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "create", namespace, resource="configcomponents")
        body = json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object with name and resource_definitions")
        name = body.get("name")
        if not isinstance(name, str) or not name:
            bad_request("body.name: required, a string")
        spec = component_spec(body)
        await self.repository.create_component(namespace, name, spec)
        return json_response(component_view(name, spec))

    async def list_environments(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "list", namespace, resource="environments")
        environments = await self.repository.list_environments(namespace)
        return json_response([environment_view(n, s) for n, s in sorted(environments.items())])

    async def get_environment(self, call: Call) -> Response:
        namespace = self.namespace(call)
        name = call.params["env"]
        await self.authorize(call, "get", namespace, name, resource="environments")
        snapshot = await self.repository.snapshot(namespace, name) if object_name_ok(name) else None
        if snapshot is None:
            not_found("environment", f'environment "{name}" not found in namespace "{namespace}"')
        return json_response(environment_view(name, snapshot.environment))

    async def create_environment(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "create", namespace, resource="environments")
        body = json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object")
        name, spec = environment_spec(body)
        await self.repository.create_environment(namespace, name, spec)
        return json_response(environment_view(name, spec))

    # --- values ---------------------------------------------------------------------------

    async def _resolve(self, call: Call, verb: str
                       ) -> tuple[str, ValuesPath, Snapshot, Point, ResourceDefinition]:
        """Parse and check a values path: environment, levels, node, resource (each missing part its own 404)."""
        namespace = self.namespace(call)
        path = values_path(call)
        snapshot = await self._snapshot(call, verb, namespace)
        return (namespace, path, *await self._locate(namespace, path, snapshot))

    async def _snapshot(self, call: Call, verb: str, namespace: str) -> Snapshot | None:
        """The environment's snapshot, once `verb` on values in the namespace is allowed (None when
        there is none, or the name cannot be one: it never reaches an API-server path)."""
        await self.authorize(call, verb, namespace, resource="configvalues")
        name = call.params["env"]
        return await self.repository.snapshot(namespace, name) if object_name_ok(name) else None

    async def _locate(self, namespace: str, path: ValuesPath, snapshot: Snapshot | None
                      ) -> tuple[Snapshot, Point, ResourceDefinition]:
        """The point and resource definition `path` names in the snapshot (each missing part its own 404)."""
        if snapshot is None:
            not_found("environment", f'environment "{path.environment}" not found in namespace "{namespace}"')
        derived = self._derived_from(snapshot)
        hit = derived.resolved.get((path.pairs, path.resource))
        if hit is not None:  # a path that resolved before against this very snapshot resolves the same again
            return snapshot, hit[0], hit[1]
        env = snapshot.environment
        hierarchy = list(env.hierarchy_levels)
        pairs: list[tuple[str, str]] = []
        for name, value in path.pairs:
            level = level_name(name, hierarchy)
            if level is None:
                not_found("level", f'environment "{path.environment}" has no level "{name}" '
                                   f"(levels: {', '.join(hierarchy)})")
            pairs.append((level, value))
        for level, value in pairs:
            if level == NODE_LEVEL and find_node(env, value) is None:
                await self._node_not_found(namespace, path.environment, value)
        try:
            point = point_from_pairs(complete_pairs(pairs, env), hierarchy)
        except LevelError as error:
            bad_request(f'environment "{path.environment}": {error}')
        mismatch = role_problem(point, env)
        if mismatch is not None:
            not_found("node", f'{mismatch} in environment "{path.environment}"')
        self._check_role(path.environment, point, snapshot)
        point = canonical_point(point, env)
        definition = resource_definition(path.resource, env, snapshot.components)
        if definition is None:
            not_found("resource", unknown_resource_message(path.resource, path.environment, env,
                                                           snapshot.components))
        _remember(derived.resolved, (path.pairs, path.resource), (point, definition))
        return snapshot, point, definition

    @staticmethod
    def _check_role(environment: str, point: Point, snapshot: Snapshot) -> None:
        """A role that no node of the environment has is a 404 (a typo would otherwise read the
        root's values), unless values are stored at it already (set before its nodes were added)."""
        role = dict(point).get(ROLE_LEVEL)
        if role is None:
            return
        roles = sorted({r for node in snapshot.environment.nodes for r in node.roles})
        if role in roles or any(dict(stored.point).get(ROLE_LEVEL) == role for stored in snapshot.values):
            return
        not_found("role", f'environment "{environment}" has no node with role "{role}" '
                          f"(roles: {', '.join(roles) or 'none, it has no nodes'})")

    async def _node_not_found(self, namespace: str, environment: str, node: str) -> NoReturn:
        """The two cases of a missing node: unknown everywhere, or assigned to another environment."""
        for name, spec in sorted((await self.repository.list_environments(namespace)).items()):
            if name != environment and find_node(spec, node) is not None:
                # Which environment has it is not said: the caller may read values, not list environments.
                not_found("node", f'node "{node}" is not assigned to environment "{environment}"')
        not_found("node", f'node "{node}" not found: no environment in namespace "{namespace}" has a node '
                          "with this FQDN or name")

    @staticmethod
    def _describe(path: ValuesPath, point: Point) -> str:
        return (f'{path.kind} of resource "{path.resource}" at {format_point(point)} '
                f'in environment "{path.environment}"')

    async def _version(self, namespace: str, path: ValuesPath, point: Point, stored: StoredValues | None,
                       number: int) -> Version:
        if stored is None:
            not_found("version", f"version {number} of the {self._describe(path, point)} not found: "
                                 "no values were ever stored there")
        versions = await self.repository.versions(namespace, stored)
        for version in versions:
            if version.number == number:
                return version
        kept = ", ".join(str(v.number) for v in versions) or "none yet"
        not_found("version", f"version {number} of the {self._describe(path, point)} not found (kept: {kept})")

    async def get_values(self, call: Call) -> Response:
        namespace = self.namespace(call)
        read = await self._snapshot(call, "get", namespace)
        derived = self._derived.get(read) if read is not None else None
        answer = derived.answers.get((call.request.path, call.request.query)) if derived is not None else None
        if answer is not None:  # this very lookup (path and query), answered before from this snapshot
            return Response(200, answer)
        path = values_path(call)
        snapshot, point, _ = await self._locate(namespace, path, read)
        number = int_param(call, "version")
        key = call.query.get("key")
        lookup = (number is None and flag(call, "effective") and not flag(call, "history")
                  and not flag(call, "trace", "show_lookup"))
        if lookup:  # a Hiera lookup: the same bytes again for as long as the snapshot is the same object
            result = self._effective_at(snapshot, path.resource, point)
            answer = dumps(result.values if key is None else self._key(result.values, key))
            _remember(self._derived_from(snapshot).answers, (call.request.path, call.request.query), answer)
            return Response(200, answer)
        stored = snapshot.find(path.resource, path.kind, point)
        headers: dict[str, str] = {}
        if flag(call, "history"):
            if stored is None:
                not_found("values", f"no {self._describe(path, point)}")
            versions = await self.repository.versions(namespace, stored)
            return json_response({"object": stored.name, "current": stored.version,
                          "versions": [v.info() for v in versions]})
        if flag(call, "effective"):
            if number is not None:
                version = await self._version(namespace, path, point, stored, number)
                assert stored is not None
                layers = [layer for layer in snapshot.layers(path.resource) if layer.source != stored.name]
                layers.append(Layer(point, path.kind, version.data, version.number, stored.name))
                result = effective(point, layers)
            else:
                result = self._effective_at(snapshot, path.resource, point)
            if flag(call, "trace", "show_lookup"):
                return json_response(self._traced(result, key))
            data: Any = result.values
        elif number is not None:
            version = await self._version(namespace, path, point, stored, number)
            data = version.data
            headers["X-Stead-Version"] = str(version.number)
        else:
            if stored is None:
                not_found("values", f"no {self._describe(path, point)} (nothing stored at this level; "
                                    "add ?effective for the merged values)")
            data = stored.data
            headers["ETag"] = f'"{stored.etag}"'
            if stored.version is not None:
                headers["X-Stead-Version"] = str(stored.version)
        if key is not None:
            data = self._key(data, key)
        return json_response(data, headers=headers)

    @staticmethod
    def _key(data: Any, key: str) -> Any:
        try:
            return get_key(data, key)
        except KeyPathError as error:
            not_found("key", str(error))

    def _traced(self, result: Effective, key: str | None) -> dict[str, Any]:
        if key is None:
            return {"values": result.values, "lookup": result.trace()}
        value = self._key(result.values, key)
        try:
            path = parse_key(key)
        except KeyPathError as error:
            not_found("key", str(error))
        return {"value": value, "lookup": {k: layer.describe() for k, layer in origin_of(result, path)}}

    async def put_values(self, call: Call) -> Response:
        namespace, path, snapshot, point, definition = await self._resolve(call, "get")
        await self._authorize_write(call, "update", namespace, snapshot.find(path.resource, path.kind, point))
        body = json_body(call)
        key = call.query.get("key")
        if key is None:
            if not isinstance(body, dict):
                bad_request("body: the data of a resource is a JSON object (use ?key= to set one key)")
            stored = await self._write(namespace, path, snapshot, point, definition, if_match(call),
                                       lambda _: body)
        else:
            try:
                parse_key(key)
            except KeyPathError as error:
                bad_request(f"query parameter key: {error}")
            stored = await self._write(namespace, path, snapshot, point, definition, if_match(call),
                                       lambda current: set_key(current, key, body))
        return self._written(stored)

    async def delete_values(self, call: Call) -> Response:
        namespace, path, snapshot, point, definition = await self._resolve(call, "get")
        key = call.query.get("key")
        stored = snapshot.find(path.resource, path.kind, point)
        if stored is None:
            not_found("values", f"no {self._describe(path, point)}")
        await self._authorize_write(call, "delete" if key is None else "update", namespace, stored)
        if key is None:
            await self._delete(namespace, path, snapshot, point, if_match(call))
            return Response(204)
        result = await self._write(namespace, path, snapshot, point, definition, if_match(call),
                                   lambda current: delete_key(current, key))
        return self._written(result)

    async def post_values(self, call: Call) -> Response:
        namespace, path, snapshot, point, definition = await self._resolve(call, "get")
        number = int_param(call, "revert")
        if number is None:
            bad_request("POST on values needs ?revert=<version>")
        stored = snapshot.find(path.resource, path.kind, point)
        await self._authorize_write(call, "update", namespace, stored)
        version = await self._version(namespace, path, point, stored, number)
        result = await self._write(namespace, path, snapshot, point, definition, if_match(call),
                                   lambda _: version.data)
        return self._written(result)

    @staticmethod
    def _written(stored: StoredValues) -> Response:
        return json_response(stored.data, headers={"ETag": f'"{stored.etag}"', "X-Stead-Object": stored.name})

    def _check_etag(self, path: ValuesPath, point: Point, stored: StoredValues | None, expect: str | None) -> None:
        if expect is not None and (stored is None or stored.etag != expect):
            raise Conflict(f'the {self._describe(path, point)} changed since it was read (ETag "{expect}")')

    async def _fresh(self, namespace: str, path: ValuesPath) -> Snapshot:
        fresh = await self.repository.snapshot(namespace, path.environment, fresh=True)
        if fresh is None:
            not_found("environment", f'environment "{path.environment}" not found in namespace "{namespace}"')
        return fresh

    async def _delete(self, namespace: str, path: ValuesPath, snapshot: Snapshot, point: Point,
                      expect: str | None) -> None:
        """Delete the object at the point; with If-Match, only while its spec is the one read."""
        current = snapshot
        for attempt in range(KEY_WRITE_ATTEMPTS):
            stored = current.find(path.resource, path.kind, point)
            if stored is None:
                if attempt:
                    return  # deleted meanwhile
                not_found("values", f"no {self._describe(path, point)}")
            self._check_etag(path, point, stored, expect)
            try:
                await self.repository.delete_values(namespace, stored,
                                                    stored.resource_version if expect is not None else None)
                return
            except Conflict:
                if attempt == KEY_WRITE_ATTEMPTS - 1:
                    raise
            current = await self._fresh(namespace, path)  # the status may have changed: check the spec again

    async def _write(self, namespace: str, path: ValuesPath, snapshot: Snapshot, point: Point,
                     definition: ResourceDefinition, expect: str | None,
                     change: Callable[[dict[str, Any]], Any]) -> StoredValues:
        """Apply `change` to the data at the point and store it, retrying lost races (a key write
        must not undo a concurrent write of another key; the operator's status writes change the
        resourceVersion, not the spec). With If-Match (`expect`), only while the spec is the one read."""
        current = snapshot
        for attempt in range(KEY_WRITE_ATTEMPTS):
            stored = current.find(path.resource, path.kind, point)
            self._check_etag(path, point, stored, expect)
            try:
                data = change(dict(stored.data) if stored is not None else {})
            except KeyPathError as error:
                not_found("key", str(error))
            if not isinstance(data, dict):
                bad_request("body: the data of a resource is a JSON object")
            problems = data_problems(data, definition, path="data")
            if problems:
                bad_request(f'resource "{path.resource}" refuses the data: ' + "; ".join(problems))
            target = ValuesTarget(path.environment, path.resource, path.kind, point, stored)
            try:
                return await self.repository.write_values(namespace, target, data, None)
            except Conflict:
                if attempt == KEY_WRITE_ATTEMPTS - 1:
                    raise
            current = await self._fresh(namespace, path)
        raise Conflict("the values kept changing during the write; retry")


VALUES_TEMPLATE = PREFIX + "/environments/{env}[/{level}/{value}...]/resources/{resource}/values"
_VALUES_HANDLERS = {"GET": ConfigStoreApi.get_values, "PUT": ConfigStoreApi.put_values,
                    "DELETE": ConfigStoreApi.delete_values, "POST": ConfigStoreApi.post_values}
ROUTES = RouteTable((
    Route(PREFIX + "/components", {
        "GET": Operation(ConfigStoreApi.list_components, "list the components", COMPONENTS["get"]),
        "POST": Operation(ConfigStoreApi.create_component,
                          "create a component: {name, resource_definitions: {name: {schema}}}", COMPONENTS["post"])},
          parameters=COMPONENTS["parameters"]),
    Route(PREFIX + "/components/{name}", {"GET": Operation(ConfigStoreApi.get_component, "one component",
                                                           COMPONENT["get"])}, parameters=COMPONENT["parameters"]),
    Route(PREFIX + "/environments", {
        "GET": Operation(ConfigStoreApi.list_environments, "list the environments", ENVIRONMENTS["get"]),
        "POST": Operation(ConfigStoreApi.create_environment,
                          "create an environment: {name, release, nodes, hierarchy_levels, components}",
                          ENVIRONMENTS["post"])},
          parameters=ENVIRONMENTS["parameters"]),
    Route(PREFIX + "/environments/{env}", {"GET": Operation(ConfigStoreApi.get_environment, "one environment",
                                                            ENVIRONMENT["get"])},
          parameters=ENVIRONMENT["parameters"]),
    Route(VALUES_TEMPLATE, {method: Operation(handler, does, VALUES_OPERATIONS[method.lower()])
                            for (method, handler), does in zip(_VALUES_HANDLERS.items(), (
        "the values stored at the level; ?effective: merged from the root down, &trace: with the level each key "
        "came from; ?key=a.b: one key; ?version=N: a kept version; ?history: the kept versions",
        "replace the values (a JSON object); ?key=a.b: set one key (the body: any JSON value); If-Match: the ETag "
        "of a read",
        "delete the values and their history; ?key=a.b: remove one key",
        "?revert=N: put version N's data back in force, as a new version"), strict=True)},
          parameters=VALUES_PARAMETERS, hot=True),
    Route(VALUES_TEMPLATE.removesuffix("/values") + "/overrides",
          {method: Operation(handler, openapi=VALUES_OPERATIONS[method.lower()])
           for method, handler in _VALUES_HANDLERS.items()},
          does="the same for the overrides (also .../override)", parameters=VALUES_PARAMETERS,
          description=OVERRIDES_DESCRIPTION, hot=True),
), SCHEMAS)
"""The configuration store's routes; values and overrides are one pattern (the handlers parse the path), tried
first: nearly every request is a lookup."""


class ConfigApi(ApiHost):
    """The API server's handler with the configuration store's routes first, over `repository`, then
    `extensions`' (as `stead operator` composes it; tests and benchmarks give their own repository)."""

    def __init__(self, repository: ConfigRepository, authenticator: Authenticator,
                 default_namespace: str = "default", extensions: Sequence[ApiExtension] = ()) -> None:
        self.store = ConfigStoreApi(repository, authenticator, default_namespace)
        self.extensions = tuple(extensions)
        super().__init__(authenticator, default_namespace, (self.store, *self.extensions))
