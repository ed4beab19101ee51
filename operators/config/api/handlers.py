"""`ConfigApi`: authentication, routing and the handlers of the configuration API."""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, NoReturn

from pydantic import ValidationError

from operators.config.api.calls import (
    KEY_WRITE_ATTEMPTS,
    NAMESPACE_PATTERN,
    PREFIX,
    UNAUTHORIZED_HEADERS,
    ApiProblem,
    Call,
    K,
    V,
    ValuesPath,
    _dumps,
    _flag,
    _if_match,
    _int_param,
    _json,
    _json_body,
    _level_name,
    _values_path,
    bad_request,
    not_found,
    object_name_ok,
)
from operators.config.api.extension import ApiExtension
from operators.config.api.openapi import OPENAPI, openapi_document, route_list
from operators.config.auth import (
    Access,
    Authenticator,
    AuthUnavailable,
    Identity,
    TooManyAttempts,
    certificate_identity,
)
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
from operators.config.models import (
    ConfigComponentSpec,
    ResourceDefinition,
    component_problems,
    data_problems,
    resource_definition,
    unknown_resource_message,
)
from operators.config.repository import (
    ConfigRepository,
    Conflict,
    Invalid,
    RepositoryError,
    Snapshot,
    StoredValues,
    Unavailable,
    ValuesTarget,
)
from operators.environment.logic import spec_problems as environment_problems
from operators.environment.models import EnvironmentSpec
from operators.runtime.core.kinds import field_path
from operators.runtime.serving.http import Request, Response

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


class ConfigApi:
    """The handlers, over an injected repository and authenticator."""

    def __init__(self, repository: ConfigRepository, authenticator: Authenticator,
                 default_namespace: str = "default", extensions: Sequence[ApiExtension] = ()) -> None:
        self.repository = repository
        self.authenticator = authenticator
        self.default_namespace = default_namespace
        self.extensions = tuple(extensions)
        self._derived: weakref.WeakKeyDictionary[Snapshot, _Derived] = weakref.WeakKeyDictionary()
        self._table = self._routes()
        self._index = route_list([doc for extension in self.extensions for doc in extension.route_docs()])
        self._openapi = OPENAPI if not self.extensions else openapi_document(self.extensions)

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

    # --- plumbing ---------------------------------------------------------------------

    def _routes(self) -> list[tuple[re.Pattern[str], dict[str, Callable[[Call], Awaitable[Response]]]]]:
        """Path patterns (on the decoded path; mutually exclusive) and their handlers by method.
        The values route comes first: nearly every request is a lookup."""
        name, env = r"(?P<name>[^/]+)", r"(?P<env>[^/]+)"
        table: list[tuple[str, Mapping[str, Callable[[Call], Awaitable[Response]]]]] = [
            (rf"{PREFIX}/environments/{env}/(?P<tail>.+)",
             {"GET": self.get_values, "PUT": self.put_values, "DELETE": self.delete_values, "POST": self.post_values}),
            (rf"{PREFIX}/environments/{env}", {"GET": self.get_environment}),
            (rf"{PREFIX}/environments", {"GET": self.list_environments, "POST": self.create_environment}),
            (rf"{PREFIX}/components/{name}", {"GET": self.get_component}),
            (rf"{PREFIX}/components", {"GET": self.list_components, "POST": self.create_component}),
            (rf"{PREFIX}/openapi\.json", {"GET": self.openapi}),
            (rf"(?:/|/api/v1/?|{PREFIX}/?)", {"GET": self.index}),
        ]
        table += [route for extension in self.extensions for route in extension.routes()]
        return [(re.compile(pattern + "$"), {**methods, **({"HEAD": methods["GET"]} if "GET" in methods else {})})
                for pattern, methods in table]

    def _route(self, request: Request) -> tuple[Callable[[Call], Awaitable[Response]], dict[str, str]]:
        for pattern, methods in self._table:
            match = pattern.match(request.path)
            if match is not None:
                handler = methods.get(request.method)
                if handler is None:
                    raise ApiProblem(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}")
                return handler, match.groupdict()
        not_found("route", f"no such route: {request.method} {request.path}")

    async def _identify(self, request: Request) -> Identity | Response:
        """Who sends the request, or the answer refusing it (401, 429, 503).

        A client certificate comes first, as in Kubernetes: a verified one is the identity (any
        `Authorization` header is then not looked at), a refused one (expired, say) is 401 with the
        reason whatever else the request carries."""
        certificate = request.certificate
        if certificate is not None:
            if certificate.problem:
                return ApiProblem(401, "Unauthorized", f"client certificate refused: {certificate.problem}"
                                  ).response(UNAUTHORIZED_HEADERS)
            return certificate_identity(certificate.user, certificate.groups)
        try:
            identity = await self.authenticator.authenticate(request.headers.get("authorization", ""), request.peer)
        except AuthUnavailable:
            return ApiProblem(503, "ServiceUnavailable", "credentials cannot be checked now; retry").response()
        except TooManyAttempts as error:
            return ApiProblem(429, "TooManyRequests", str(error)).response({"Retry-After": "1"})
        if identity is None:
            return ApiProblem(401, "Unauthorized", "valid credentials are required").response(UNAUTHORIZED_HEADERS)
        return identity

    async def gate(self, request: Request) -> Response | None:
        """The HTTP server's gate (`HttpServer.gate`): a request with a body is authenticated on its head,
        before the body is read. The handler authenticates it again, from the review cache."""
        found = await self._identify(request)
        return found if isinstance(found, Response) else None

    async def __call__(self, request: Request) -> Response:
        """Authenticate every request before routing can tell anything, then map errors to JSON."""
        found = await self._identify(request)
        if isinstance(found, Response):
            return found
        identity = found
        try:
            handler, params = self._route(request)
            return await handler(Call(request, params, identity))
        except ApiProblem as problem:
            return problem.response()
        except AuthUnavailable:
            return ApiProblem(503, "ServiceUnavailable", "permissions cannot be checked now; retry").response()
        except Conflict as error:
            return ApiProblem(409, "Conflict", str(error)).response()
        except Invalid as error:
            return ApiProblem(400, "BadRequest", str(error)).response()
        except Unavailable as error:
            log.warning("configuration store unavailable: %s", error)
            return ApiProblem(503, "ServiceUnavailable", "the configuration store is unavailable; retry").response()
        except RepositoryError as error:
            return ApiProblem(500, "InternalError", str(error)).response()

    @staticmethod
    def problem(status: int, message: str) -> Response:
        """The answer to a request the HTTP server refuses itself (malformed, too large, too slow):
        the API's error body."""
        error = "InternalError" if status == 500 else HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
        return ApiProblem(status, error, message).response()

    def _namespace(self, call: Call) -> str:
        namespace = call.query.get("namespace", self.default_namespace)
        if not NAMESPACE_PATTERN.match(namespace) or len(namespace) > 63:
            bad_request(f"query parameter namespace: {namespace!r} is not a valid namespace name")
        return namespace

    async def _authorize(self, call: Call, verb: str, resource: str, namespace: str, name: str = "") -> None:
        identity = call.identity
        if not await self.authenticator.authorize(identity, Access(verb, resource, namespace, name)):
            raise ApiProblem(403, "Forbidden",
                             f'user "{identity.user}" may not {verb} {resource} in namespace "{namespace}"')

    async def _authorize_write(self, call: Call, verb: str, namespace: str, stored: StoredValues | None) -> None:
        """A write of values, as RBAC sees it: `create` when no object holds them yet (a PUT that
        creates), else `verb` on that very object (by name)."""
        if stored is None:
            await self._authorize(call, "create", "configvalues", namespace)
        else:
            await self._authorize(call, verb, "configvalues", namespace, stored.name)

    # --- components and environments ---------------------------------------------------

    @staticmethod
    def _component_view(name: str, spec: ConfigComponentSpec) -> dict[str, Any]:
        definitions: dict[str, Any] = {}
        for resource in spec.resources:
            definition: dict[str, Any] = {}
            if resource.value_schema is not None:
                definition["schema"] = resource.value_schema
            if resource.description:
                definition["description"] = resource.description
            definitions[resource.name] = definition
        view: dict[str, Any] = {"id": name, "name": name, "resource_definitions": definitions}
        if spec.description:
            view["description"] = spec.description
        return view

    async def list_components(self, call: Call) -> Response:
        namespace = self._namespace(call)
        await self._authorize(call, "list", "configcomponents", namespace)
        components = await self.repository.list_components(namespace)
        return _json([self._component_view(n, s) for n, s in sorted(components.items())])

    async def get_component(self, call: Call) -> Response:
        namespace = self._namespace(call)
        name = call.params["name"]
        await self._authorize(call, "get", "configcomponents", namespace, name)
        spec = (await self.repository.list_components(namespace)).get(name)
        if spec is None:
            not_found("component", f'component "{name}" not found in namespace "{namespace}"')
        return _json(self._component_view(name, spec))

    async def create_component(self, call: Call) -> Response:
        namespace = self._namespace(call)
        await self._authorize(call, "create", "configcomponents", namespace)
        body = _json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object with name and resource_definitions")
        name = body.get("name")
        if not isinstance(name, str) or not name:
            bad_request("body.name: required, a string")
        spec = _component_spec(body)
        await self.repository.create_component(namespace, name, spec)
        return _json(self._component_view(name, spec))

    @staticmethod
    def _environment_view(name: str, spec: EnvironmentSpec) -> dict[str, Any]:
        return {
            "id": name, "name": name, "release": spec.release, "components": list(spec.components),
            "hierarchy_levels": list(spec.hierarchy_levels),
            "nodes": [node.model_dump(by_alias=True, exclude_none=True) for node in spec.nodes],
        }

    async def list_environments(self, call: Call) -> Response:
        namespace = self._namespace(call)
        await self._authorize(call, "list", "environments", namespace)
        environments = await self.repository.list_environments(namespace)
        return _json([self._environment_view(n, s) for n, s in sorted(environments.items())])

    async def get_environment(self, call: Call) -> Response:
        namespace = self._namespace(call)
        name = call.params["env"]
        await self._authorize(call, "get", "environments", namespace, name)
        snapshot = await self.repository.snapshot(namespace, name) if object_name_ok(name) else None
        if snapshot is None:
            not_found("environment", f'environment "{name}" not found in namespace "{namespace}"')
        return _json(self._environment_view(name, snapshot.environment))

    async def create_environment(self, call: Call) -> Response:
        namespace = self._namespace(call)
        await self._authorize(call, "create", "environments", namespace)
        body = _json_body(call)
        if not isinstance(body, dict):
            bad_request("body: expected a JSON object")
        name = body.get("name", body.get("id"))
        if not isinstance(name, str) or not name:
            bad_request("body.name: required, a string")
        raw = {_camel(k): v for k, v in body.items() if k not in ("id", "name")}
        try:
            spec = EnvironmentSpec.model_validate(raw)
        except ValidationError as error:
            bad_request("; ".join(f"body.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()))
        problems = environment_problems(spec.model_dump(by_alias=True))
        if problems:
            bad_request("; ".join(p.replace("spec.", "body.", 1) for p in problems))
        await self.repository.create_environment(namespace, name, spec)
        return _json(self._environment_view(name, spec))

    # --- values ---------------------------------------------------------------------------

    async def _resolve(self, call: Call, verb: str
                       ) -> tuple[str, ValuesPath, Snapshot, Point, ResourceDefinition]:
        """Parse and check a values path: environment, levels, node, resource (each missing part its own 404)."""
        namespace = self._namespace(call)
        path = _values_path(call)
        snapshot = await self._snapshot(call, verb, namespace)
        return (namespace, path, *await self._locate(namespace, path, snapshot))

    async def _snapshot(self, call: Call, verb: str, namespace: str) -> Snapshot | None:
        """The environment's snapshot, once `verb` on values in the namespace is allowed (None when
        there is none, or the name cannot be one: it never reaches an API-server path)."""
        await self._authorize(call, verb, "configvalues", namespace)
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
            level = _level_name(name, hierarchy)
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
        namespace = self._namespace(call)
        read = await self._snapshot(call, "get", namespace)
        derived = self._derived.get(read) if read is not None else None
        answer = derived.answers.get((call.request.path, call.request.query)) if derived is not None else None
        if answer is not None:  # this very lookup (path and query), answered before from this snapshot
            return Response(200, answer)
        path = _values_path(call)
        snapshot, point, _ = await self._locate(namespace, path, read)
        number = _int_param(call, "version")
        key = call.query.get("key")
        lookup = (number is None and _flag(call, "effective") and not _flag(call, "history")
                  and not _flag(call, "trace", "show_lookup"))
        if lookup:  # a Hiera lookup: the same bytes again for as long as the snapshot is the same object
            result = self._effective_at(snapshot, path.resource, point)
            answer = _dumps(result.values if key is None else self._key(result.values, key))
            _remember(self._derived_from(snapshot).answers, (call.request.path, call.request.query), answer)
            return Response(200, answer)
        stored = snapshot.find(path.resource, path.kind, point)
        headers: dict[str, str] = {}
        if _flag(call, "history"):
            if stored is None:
                not_found("values", f"no {self._describe(path, point)}")
            versions = await self.repository.versions(namespace, stored)
            return _json({"object": stored.name, "current": stored.version,
                          "versions": [v.info() for v in versions]})
        if _flag(call, "effective"):
            if number is not None:
                version = await self._version(namespace, path, point, stored, number)
                assert stored is not None
                layers = [layer for layer in snapshot.layers(path.resource) if layer.source != stored.name]
                layers.append(Layer(point, path.kind, version.data, version.number, stored.name))
                result = effective(point, layers)
            else:
                result = self._effective_at(snapshot, path.resource, point)
            if _flag(call, "trace", "show_lookup"):
                return _json(self._traced(result, key))
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
        return _json(data, headers=headers)

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
        body = _json_body(call)
        key = call.query.get("key")
        if key is None:
            if not isinstance(body, dict):
                bad_request("body: the data of a resource is a JSON object (use ?key= to set one key)")
            stored = await self._write(namespace, path, snapshot, point, definition, _if_match(call),
                                       lambda _: body)
        else:
            try:
                parse_key(key)
            except KeyPathError as error:
                bad_request(f"query parameter key: {error}")
            stored = await self._write(namespace, path, snapshot, point, definition, _if_match(call),
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
            await self._delete(namespace, path, snapshot, point, _if_match(call))
            return Response(204)
        result = await self._write(namespace, path, snapshot, point, definition, _if_match(call),
                                   lambda current: delete_key(current, key))
        return self._written(result)

    async def post_values(self, call: Call) -> Response:
        namespace, path, snapshot, point, definition = await self._resolve(call, "get")
        number = _int_param(call, "revert")
        if number is None:
            bad_request("POST on values needs ?revert=<version>")
        stored = snapshot.find(path.resource, path.kind, point)
        await self._authorize_write(call, "update", namespace, stored)
        version = await self._version(namespace, path, point, stored, number)
        result = await self._write(namespace, path, snapshot, point, definition, _if_match(call),
                                   lambda _: version.data)
        return self._written(result)

    @staticmethod
    def _written(stored: StoredValues) -> Response:
        return _json(stored.data, headers={"ETag": f'"{stored.etag}"', "X-Stead-Object": stored.name})

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

    async def openapi(self, call: Call) -> Response:
        return _json(self._openapi)

    async def index(self, call: Call) -> Response:
        """The routes, one per line (any authenticated caller: it is what the documentation says)."""
        return Response(200, self._index)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def _component_spec(body: Mapping[str, Any]) -> ConfigComponentSpec:
    """A ConfigComponent spec from a request body in Fuel's shape (`resource_definitions` as a mapping of
    name to definition) or Stead's (`resources` as a list)."""
    definitions = body.get("resource_definitions", body.get("resourceDefinitions"))
    raw: dict[str, Any] = {}
    if definitions is not None:
        if not isinstance(definitions, dict):
            bad_request("body.resource_definitions: expected a mapping of resource name to definition")
        resources = []
        for name, definition in definitions.items():
            if definition is not None and not isinstance(definition, dict):
                bad_request(f"body.resource_definitions.{name}: expected a mapping")
            resources.append({"name": name, **(definition or {})})
        raw["resources"] = resources
    elif "resources" in body:
        raw["resources"] = body["resources"]
    if "description" in body:
        raw["description"] = body["description"]
    try:
        spec = ConfigComponentSpec.model_validate(raw)
    except ValidationError as error:
        bad_request("; ".join(f"body.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()))
    problems = component_problems(spec.model_dump(by_alias=True, exclude_none=True))
    if problems:
        bad_request("; ".join(p.replace("spec.", "body.", 1) for p in problems))
    return spec
