"""The deployment graphs HTTP API (seed 004; docs/graphs.md, "The REST API"): Fuel's paths under `/api/v1`,
served on the configuration API's server (same port, TLS and authentication) as its extension
(`operators.config.api.extension`).

    GET|POST                  /api/v1/graphs/                                   list, create
    GET|PUT|PATCH|DELETE      /api/v1/graphs/<name>/                            one graph (its object's name)
    GET|PUT|PATCH             /api/v1/releases/<release>/deployment_graphs/<type>/
    GET|PUT|PATCH             /api/v1/clusters/<environment>/deployment_graphs/<type>/
    GET|PUT|PATCH             /api/v1/plugins/<plugin>/deployment_graphs/<type>/
    GET                       /api/v1/clusters/<environment>/deployment_tasks/?graph_type=T
    GET                       /api/v1/clusters/<environment>/history/          task instances across runs
    POST                      /api/v1/graphs/execute/                           a GraphRun (202)
    GET                       /api/v1/graphruns/<run>/output/                   its task instances, output sizes
    GET                       /api/v1/graphruns/<run>/output/<task>/?node=N     an instance's whole output, paged

The trailing slash is optional. Bodies use Fuel's names: a graph is `{id, name, type, relations: [{model,
model_id, type}], tasks}` with the tasks in Fuel's task file form (`cross-depends`, `required_for`, `role`,
`{yaql_exp: ...}`), translated with `operators.graphs.fuel`; "cluster" is Fuel's word for an Environment.
Kubernetes stays the source of truth: every write is a DeploymentGraph or a GraphRun object, so the
admission webhook judges it (a second graph of an owner and type is its 409, passed on) and GitOps sees
the same data.

Writes impersonate the caller (`ExtensionBase.caller`): the API server authorizes, admits and audits them as the
caller's. Authorization: a SubjectAccessReview of the caller for `deploymentgraphs.stead.dev` with the verb (get,
list, create, update, delete), `graphruns.stead.dev` (create) for an execution, (list) for the history, in the
namespace (`?namespace=`, default the server's).

The helpers that find, write and merge graphs (`graph_items`, `find_graph`, `save_graph`, `levels_of`) are
shared with `stead graph` (`operators.graphs.cli`); those that need no models are in `operators.graphs.objects`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from operators import API_VERSION
from operators.config.api.calls import ApiProblem, Call, _json, _json_body, bad_request, not_found, object_name_ok
from operators.config.api.extension import ExtensionBase, Handler, RouteDoc, passed_on
from operators.environment.models import ENVIRONMENT, EnvironmentSpec
from operators.graphs.fuel import FuelFormatError, task_from_fuel, task_to_fuel
from operators.graphs.history import (
    FINISHED,
    MAX_PAGE,
    HistoryStore,
    Query,
    decode_token,
    history_path,
    to_csv,
)
from operators.graphs.kept import graph_types, no_such_type
from operators.graphs.merge import MergedGraph, merge_graphs
from operators.graphs.models import (
    DEPLOYMENT_GRAPH,
    GRAPH_RUN,
    DeploymentGraphSpec,
    GraphRunSpec,
    Task,
    check_tasks,
)
from operators.graphs.objects import find_graph, graph_items, graph_name, owner_of, type_of
from operators.graphs.output import (
    PAGE_BYTES,
    Ambiguous,
    NoSuchInstance,
    RunInstance,
    find,
    instances,
    output_file,
    output_size,
    read_page,
    read_plan,
    select,
)
from operators.runtime.core.kinds import field_path
from operators.runtime.kube.client import ApiError, Requester, custom_path
from operators.runtime.serving.http import Response
from pipelines.model import NAME_PATTERN
from pipelines.paths import RunPaths

PREFIX = "/api/v1"
MODEL_OF = {"release": "release", "plugin": "plugin", "environment": "cluster"}
"""Stead's owner kinds -> Fuel's relation models (an Environment is a Fuel cluster)."""
KIND_OF = {"release": "release", "plugin": "plugin", "cluster": "environment", "environment": "environment"}
MERGE_PATCH = "application/merge-patch+json"
_TYPE = re.compile(r"^[a-zA-Z0-9_-]{1,63}$")
_TASK = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,119}$")
_NODE = re.compile(NAME_PATTERN)
"""What a task id (`models.TaskId`) and a node name (the runner's target names) may be: anything else in a
URL is refused before it is looked up."""


# --- shared with `stead graph` ----------------------------------------------------------------------


def tasks_of(item: Mapping[str, Any]) -> list[Task]:
    """A stored graph's tasks (ValueError naming the graph when its spec is invalid)."""
    try:
        return DeploymentGraphSpec.model_validate(dict(item.get("spec") or {})).tasks
    except ValidationError as error:
        first = error.errors()[0]
        raise ValueError(f"DeploymentGraph {item['metadata']['name']} has an invalid spec: "
                         f"spec.{field_path(first['loc'])}: {first['msg']}") from None


def graph_spec(kind: str, owner: str, graph_type: str, tasks: Sequence[Task], name: str | None) -> dict[str, Any]:
    """A DeploymentGraph's spec as the API server stores it (camelCase, empty fields left out)."""
    spec: dict[str, Any] = {"type": graph_type, kind: owner,
                            "tasks": [t.model_dump(by_alias=True, mode="json", exclude_defaults=True) for t in tasks]}
    if name:
        spec["name"] = name
    return spec


async def save_graph(kube: Requester, namespace: str, kind: str, owner: str, graph_type: str,
                     tasks: Sequence[Task] | None, name: str | None = None,
                     items: Sequence[Mapping[str, Any]] | None = None) -> tuple[dict[str, Any], bool]:
    """Create the graph of (owner, type), or update the one there is (its tasks when given, its verbose name
    when given): (the object, whether it was created). The one-graph-per-owner-and-type rule is kept by
    writing to the graph found rather than adding a second."""
    items = await graph_items(kube, namespace) if items is None else items
    found = find_graph(items, kind, owner, graph_type)
    if found is not None:
        patch: dict[str, Any] = {"metadata": {"resourceVersion": found["metadata"].get("resourceVersion")},
                                 "spec": {}}
        if tasks is not None:
            patch["spec"]["tasks"] = graph_spec(kind, owner, graph_type, tasks, None)["tasks"]
        if name is not None:
            patch["spec"]["name"] = name or None
        updated = await kube.request("PATCH", custom_path(DEPLOYMENT_GRAPH.plural, namespace,
                                                          str(found["metadata"]["name"])),
                                     patch, content_type=MERGE_PATCH)
        return dict(updated), False
    taken = {str(i["metadata"]["name"]) for i in items}
    object_name = graph_name(kind, owner, graph_type)
    metadata: dict[str, Any] = {"namespace": namespace}
    if object_name in taken:  # another owner's graph has it (types a_b and a-b): let the server add a suffix
        metadata["generateName"] = object_name[:240] + "-"
    else:
        metadata["name"] = object_name
    body = {"apiVersion": API_VERSION, "kind": DEPLOYMENT_GRAPH.kind, "metadata": metadata,
            "spec": graph_spec(kind, owner, graph_type, tasks or [], name)}
    created = await kube.request("POST", custom_path(DEPLOYMENT_GRAPH.plural, namespace), body)
    return dict(created), True


@dataclass(frozen=True)
class Levels:
    """The graphs of one type an environment's merge takes, level by level (None: the level has no graph)."""

    environment: str
    spec: EnvironmentSpec
    release: list[Task] | None
    plugins: list[tuple[str, list[Task]]]
    own: list[Task] | None

    def merged(self, level: str = "all") -> MergedGraph:
        """The merge (release < plugins < environment) of `all` levels, or one level: `release`, `plugins`,
        `environment` (MergeError when two plugins define the same task)."""
        return merge_graphs(
            self.release if level in ("all", "release") else None,
            self.plugins if level in ("all", "plugins") else (),
            self.own if level in ("all", "environment") else None,
            release_name=self.spec.release, environment_name=self.environment)


async def levels_of(kube: Requester, namespace: str, environment: str, graph_type: str,
                    env: Mapping[str, Any]) -> Levels:
    """The levels of `graph_type` for the Environment object `env` (ValueError naming an invalid graph)."""
    spec = EnvironmentSpec.model_validate(dict(env.get("spec") or {}))
    items = await graph_items(kube, namespace)

    def level(kind: str, owner: str) -> list[Task] | None:
        found = find_graph(items, kind, owner, graph_type)
        return None if found is None else tasks_of(found)

    plugins = [(p, tasks) for p in spec.plugins if (tasks := level("plugin", p)) is not None]
    return Levels(environment, spec, level("release", spec.release), plugins, level("environment", environment))


def environment_graph_types(items: Sequence[Mapping[str, Any]], environment: str, env: Mapping[str, Any]) -> list[str]:
    """The graph types the Environment object `env` has, of the namespace's DeploymentGraph objects `items` (an
    invalid graph counts for none, as a run ignores it: `kept.graph_types`)."""
    spec = EnvironmentSpec.model_validate(dict(env.get("spec") or {}))
    graphs = []
    for item in items:
        with contextlib.suppress(ValidationError):
            graphs.append(DeploymentGraphSpec.model_validate(dict(item.get("spec") or {})))
    return graph_types(environment, spec, graphs)


def tasks_from_fuel(raw: Any, where: str = "body.tasks") -> list[Task]:
    """Tasks in Fuel's form (a list of mappings) -> the model; FuelFormatError naming the task and field, or
    the problems the schema cannot express (duplicate ids, bad regexes, conditions)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise FuelFormatError(f"{where}: a list of tasks (Fuel's task file form)")
    tasks = [task_from_fuel(item, f"{where}[{i}]") for i, item in enumerate(raw)]
    problems = check_tasks(tasks, where)
    if problems:
        raise FuelFormatError("; ".join(problems))
    return tasks


# --- the API ------------------------------------------------------------------------------------------




def _count(call: Call, name: str, least: int, most: int | None) -> int | None:
    """A whole-number query parameter in [least, most] (None when absent; 400 naming it when not)."""
    raw = call.query.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < least or (most is not None and int(raw) > most):
        bounds = f"from {least}" + (f" to {most}" if most is not None else "")
        bad_request(f"query parameter {name}: expected a whole number {bounds}, got {raw!r}")
    return int(raw)


def _subgraphs(raw: Any) -> Any:
    """A body's subgraphs as the GraphRun's: `{start, end, start_nodes?, end_nodes?}`, where an entry of start
    or end may carry its nodes as Fuel wrote them (`"netconfig/node-1,node-2"`, `operators.graphs.ranges`);
    the entries of one side name one node list. What is not a list of objects is left to the model's check."""
    from operators.graphs.ranges import split_range

    if not isinstance(raw, list):
        return raw or []
    out = []
    for k, sub in enumerate(raw):
        if not isinstance(sub, dict):
            out.append(sub)
            continue
        made: dict[str, Any] = {key: value for key, value in sub.items()
                                if key not in ("start", "end", "start_nodes", "end_nodes")}
        for side in ("start", "end"):
            nodes = sub.get(f"{side}_nodes", sub.get(f"{side}Nodes"))
            refs = sub.get(side)
            if isinstance(refs, list) and all(isinstance(r, str) for r in refs):
                split = []
                for i, ref in enumerate(refs):
                    try:
                        names, on = split_range(ref)
                    except ValueError as error:
                        bad_request(f"body.subgraphs[{k}].{side}[{i}]: {error}")
                    if on is not None:
                        if nodes is not None and list(nodes) != on:
                            bad_request(f"body.subgraphs[{k}].{side}[{i}]: the entries of {side} name one node list "
                                        f"({on} here, {nodes} before): split them into subgraphs")
                        nodes = on
                    split.extend(names)
                refs = split
            if refs is not None:
                made[side] = refs
            if nodes is not None:
                made[f"{side}Nodes"] = nodes
        out.append(made)
    return out


def graph_view(item: Mapping[str, Any]) -> dict[str, Any]:
    """A DeploymentGraph as Fuel's API shows a graph: id (the object's name), name, type, relations, tasks in
    Fuel's form; plus what Stead adds (namespace, ready, and the problem of an invalid one)."""
    meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
    owner = owner_of(item)
    graph_type = type_of(item)
    view: dict[str, Any] = {
        "id": meta.get("name"), "name": spec.get("name"), "type": graph_type,
        "relations": [{"model": MODEL_OF[owner[0]], "model_id": owner[1], "type": graph_type}] if owner else [],
        "namespace": meta.get("namespace"),
        "ready": any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
    }
    try:
        view["tasks"] = [task_to_fuel(t) for t in tasks_of(item)]
    except ValueError as error:
        view["tasks"], view["problem"] = list(spec.get("tasks") or []), str(error)
    return view


class GraphsApi(ExtensionBase):
    """The handlers, over the API server's client (the operator's credentials) and the authenticator that
    checks callers (their permissions are reviewed per request)."""

    resource = DEPLOYMENT_GRAPH.plural

    # --- the extension ------------------------------------------------------------------------

    def routes(self) -> Sequence[tuple[str, Mapping[str, Handler]]]:
        owner, graph_type = r"(?P<owner>[^/]+)", r"(?P<type>[^/]+)"
        return [
            (rf"{PREFIX}/graphs/execute/?", {"POST": self.execute}),
            (rf"{PREFIX}/graphs/(?P<name>[^/]+)/?",
             {"GET": self.get, "PUT": self.put, "PATCH": self.patch, "DELETE": self.delete}),
            (rf"{PREFIX}/graphs/?", {"GET": self.list_graphs, "POST": self.create}),
            (rf"{PREFIX}/(?P<model>releases|clusters|plugins)/{owner}/deployment_graphs/{graph_type}/?",
             {"GET": self.get_owned, "PUT": self.put_owned, "PATCH": self.patch_owned}),
            (rf"{PREFIX}/clusters/{owner}/deployment_tasks/?", {"GET": self.deployment_tasks}),
            (rf"{PREFIX}/clusters/{owner}/history/?", {"GET": self.history}),
            (rf"{PREFIX}/graphruns/(?P<run>[^/]+)/output/(?P<task>[^/]+)/?", {"GET": self.task_output}),
            (rf"{PREFIX}/graphruns/(?P<run>[^/]+)/output/?", {"GET": self.run_outputs}),
        ]

    def route_docs(self) -> Sequence[RouteDoc]:
        return ROUTE_DOCS

    def openapi_paths(self) -> Mapping[str, Any]:
        return OPENAPI_PATHS

    def openapi_schemas(self) -> Mapping[str, Any]:
        return OPENAPI_SCHEMAS

    # --- plumbing -----------------------------------------------------------------------------

    async def _request(self, method: str, path: str, body: Any = None, call: Call | None = None,
                       **options: Any) -> Any:
        """A read (None for a 404) or a write, its refusal passed on; a write gives its `call`, whose caller
        it is made as (`caller`)."""
        kube = self.kube if call is None else self.caller(call)
        try:
            return await kube.request(method, path, body, **options)
        except ApiError as error:
            if error.status == 404 and method == "GET":
                return None
            passed_on(error, f"{method} {path}", "graph")

    async def _items(self, namespace: str) -> list[dict[str, Any]]:
        try:
            return await graph_items(self.kube, namespace)
        except ApiError as error:
            passed_on(error, "listing deployment graphs", "graph")

    async def _environment(self, namespace: str, name: str) -> dict[str, Any]:
        """The Environment of the path, or 404 naming the environments there."""
        found = await self._request("GET", custom_path(ENVIRONMENT.plural, namespace, name)) \
            if object_name_ok(name) else None
        if found is None:
            listed = await self._request("GET", custom_path(ENVIRONMENT.plural, namespace)) or {}
            names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])
            not_found("cluster", f'environment (cluster) "{name}" not found in namespace "{namespace}" '
                                  f"(environments here: {', '.join(names) or 'none'})")
        return dict(found)

    @staticmethod
    def _type(value: Any, where: str) -> str:
        if value is None:
            return "default"
        if not isinstance(value, str) or not _TYPE.match(value):
            bad_request(f"{where}: a graph type is 1 to 63 letters, digits, '-' or '_', not {value!r}")
        return value

    @staticmethod
    def _body(call: Call, what: str) -> dict[str, Any]:
        body = _json_body(call)
        if not isinstance(body, dict):
            bad_request(f"body: expected a JSON object {what}")
        return body

    @staticmethod
    def _tasks(body: Mapping[str, Any], required: bool) -> list[Task] | None:
        if "tasks" not in body:
            if required:
                bad_request("body.tasks: required, the graph's tasks in Fuel's form (a list)")
            return None
        try:
            return tasks_from_fuel(body["tasks"])
        except FuelFormatError as error:
            bad_request(str(error))

    @staticmethod
    def _verbose(body: Mapping[str, Any]) -> str | None:
        name = body.get("name")
        if name is not None and (not isinstance(name, str) or len(name) > 253):
            bad_request("body.name: the verbose name, a string of at most 253 characters")
        return name

    @staticmethod
    def _owner(body: Mapping[str, Any]) -> tuple[str, str]:
        """The owner a body names: `relations: [{model, model_id}]` (Fuel's), or one of `cluster`,
        `environment`, `release`, `plugin`."""
        found: list[tuple[str, str]] = []
        for i, relation in enumerate(body.get("relations") or []):
            if not isinstance(relation, dict) or relation.get("model") not in KIND_OF \
                    or not isinstance(relation.get("model_id"), str) or not relation["model_id"]:
                bad_request(f"body.relations[{i}]: expected {{model: cluster|release|plugin, model_id: NAME}}")
            found.append((KIND_OF[relation["model"]], relation["model_id"]))
        for key in ("cluster", "environment", "release", "plugin"):
            value = body.get(key)
            if value is not None:
                if not isinstance(value, str) or not value:
                    bad_request(f"body.{key}: expected a name")
                found.append((KIND_OF[key], value))
        if len(set(found)) != 1:
            bad_request("body: a graph belongs to exactly one of a release, a plugin or a cluster: give relations "
                        f"[{{model, model_id}}] (got {len(set(found))} owners)")
        return found[0]

    async def _named(self, call: Call, verb: str, namespace: str) -> dict[str, Any]:
        name = call.params["name"]
        found = await self._request("GET", custom_path(DEPLOYMENT_GRAPH.plural, namespace, name)) \
            if object_name_ok(name) else None
        if found is None:
            await self._authorize(call, verb, namespace)
            names = [str(i["metadata"]["name"]) for i in await self._items(namespace)]
            not_found("graph", f'deployment graph "{name}" not found in namespace "{namespace}" (graphs here: '
                                f"{', '.join(names) or 'none'})")
        await self._authorize(call, verb, namespace, name)
        return dict(found)

    async def _write(self, call: Call, namespace: str, kind: str, owner: str, graph_type: str,
                     tasks: list[Task] | None, name: str | None, items: Sequence[Mapping[str, Any]] | None = None
                     ) -> tuple[dict[str, Any], bool]:
        try:
            return await save_graph(self.caller(call), namespace, kind, owner, graph_type, tasks, name, items)
        except ApiError as error:
            passed_on(error, f"writing the {graph_type!r} graph of {MODEL_OF[kind]} {owner}", "graph")

    # --- /graphs --------------------------------------------------------------------------------

    async def list_graphs(self, call: Call) -> Response:
        namespace = self._namespace(call)
        await self._authorize(call, "list", namespace)
        return _json([graph_view(i) for i in await self._items(namespace)])

    async def create(self, call: Call) -> Response:
        namespace = self._namespace(call)
        await self._authorize(call, "create", namespace)
        body = self._body(call, "{type, name?, relations: [{model, model_id}], tasks}")
        kind, owner = self._owner(body)
        graph_type = self._type(body.get("type"), "body.type")
        tasks, name = self._tasks(body, required=False), self._verbose(body)
        if kind == "environment":
            await self._environment(namespace, owner)
        items = await self._items(namespace)
        existing = find_graph(items, kind, owner, graph_type)
        if existing is not None:
            raise ApiProblem(409, "Conflict", f"deployment graph {existing['metadata']['name']} is the "
                                              f"{graph_type!r} graph of {MODEL_OF[kind]} {owner} already: one graph "
                                              "per owner and type (PUT or PATCH that one)")
        created, _ = await self._write(call, namespace, kind, owner, graph_type, tasks or [], name, items)
        return _json(graph_view(created), status=201)

    async def get(self, call: Call) -> Response:
        namespace = self._namespace(call)
        return _json(graph_view(await self._named(call, "get", namespace)))

    async def put(self, call: Call) -> Response:
        return await self._update(call, replace=True)

    async def patch(self, call: Call) -> Response:
        return await self._update(call, replace=False)

    async def _update(self, call: Call, replace: bool) -> Response:
        """PUT: the verbose name and the tasks as given (absent: none); PATCH: those given. The type and the
        owner stay (a graph of another owner or type is another graph: POST it)."""
        namespace = self._namespace(call)
        body = self._body(call, "{name?, tasks}")
        found = await self._named(call, "update", namespace)
        owner = owner_of(found)
        if "type" in body and self._type(body["type"], "body.type") != type_of(found):
            bad_request("body.type: a graph's type does not change (create a graph of the other type)")
        if "relations" in body and owner is not None and self._owner(body) != owner:
            bad_request("body.relations: a graph's owner does not change (create a graph for the other owner)")
        tasks = self._tasks(body, required=False)
        name = self._verbose(body)
        if replace:
            tasks, name = tasks or [], name or ""
        meta = found["metadata"]
        patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": {}}
        if tasks is not None:
            patch["spec"]["tasks"] = [t.model_dump(by_alias=True, mode="json", exclude_defaults=True) for t in tasks]
        if name is not None:
            patch["spec"]["name"] = name or None
        updated = await self._request("PATCH", custom_path(DEPLOYMENT_GRAPH.plural, namespace, str(meta["name"])),
                                      patch, call, content_type=MERGE_PATCH)
        return _json(graph_view(updated))

    async def delete(self, call: Call) -> Response:
        namespace = self._namespace(call)
        found = await self._named(call, "delete", namespace)
        meta = found["metadata"]
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta.get("uid")}}
        await self._request("DELETE", custom_path(DEPLOYMENT_GRAPH.plural, namespace, str(meta["name"])), options,
                            call)
        return Response(204, b"")

    # --- /<model>/<owner>/deployment_graphs/<type> ------------------------------------------------

    async def _owned(self, call: Call, verb: str) -> tuple[str, str, str, str, list[dict[str, Any]]]:
        """(namespace, owner kind, owner, type, the namespace's graphs), the caller allowed `verb`; a cluster's
        Environment must exist."""
        namespace = self._namespace(call)
        kind = KIND_OF[call.params["model"].removesuffix("s")]
        owner, graph_type = call.params["owner"], self._type(call.params["type"], "path: the graph type")
        await self._authorize(call, verb, namespace)
        if kind == "environment":
            await self._environment(namespace, owner)
        return namespace, kind, owner, graph_type, await self._items(namespace)

    async def get_owned(self, call: Call) -> Response:
        namespace, kind, owner, graph_type, items = await self._owned(call, "get")
        found = find_graph(items, kind, owner, graph_type)
        if found is None:
            types = sorted(type_of(i) for i in items if owner_of(i) == (kind, owner))
            not_found("graph", f"{MODEL_OF[kind]} {owner} has no {graph_type!r} graph in namespace \"{namespace}\" "
                                f"(its graph types: {', '.join(types) or 'none'})")
        return _json(graph_view(found))

    async def put_owned(self, call: Call) -> Response:
        """Create the graph of that owner and type, or replace its tasks and verbose name."""
        body = self._body(call, "{name?, tasks}")
        tasks, name = self._tasks(body, required=True), self._verbose(body)
        namespace, kind, owner, graph_type, items = await self._owned(call, "update")
        existed = find_graph(items, kind, owner, graph_type) is not None
        if not existed:
            await self._authorize(call, "create", namespace)
        written, created = await self._write(call, namespace, kind, owner, graph_type, tasks, name or "", items)
        return _json(graph_view(written), status=201 if created else 200)

    async def patch_owned(self, call: Call) -> Response:
        body = self._body(call, "{name?, tasks?}")
        tasks, name = self._tasks(body, required=False), self._verbose(body)
        namespace, kind, owner, graph_type, items = await self._owned(call, "update")
        if find_graph(items, kind, owner, graph_type) is None:
            types = sorted(type_of(i) for i in items if owner_of(i) == (kind, owner))
            not_found("graph", f"{MODEL_OF[kind]} {owner} has no {graph_type!r} graph in namespace \"{namespace}\" "
                                f"to patch (its graph types: {', '.join(types) or 'none'}; PUT creates one)")
        written, _ = await self._write(call, namespace, kind, owner, graph_type, tasks, name, items)
        return _json(graph_view(written))

    # --- merged tasks and execution -----------------------------------------------------------------

    async def deployment_tasks(self, call: Call) -> Response:
        """The merged tasks of a type (`?graph_type=`, also `?type=`; default `default`) in Fuel's form, in
        order; `?level=release|plugins|cluster` gives that level alone; `?origin` adds to each task the level it
        came from (not by default: a task's unknown keys are kept, so a body sent back would keep it too)."""
        namespace = self._namespace(call)
        await self._authorize(call, "list", namespace)
        graph_type = self._type(call.query.get("graph_type", call.query.get("type")), "query parameter graph_type")
        level = call.query.get("level", "all")
        levels = {"all": "all", "release": "release", "plugins": "plugins", "cluster": "environment",
                  "environment": "environment"}
        if level not in levels:
            bad_request(f"query parameter level: one of all, release, plugins, cluster, not {level!r}")
        environment = call.params["owner"]
        env = await self._environment(namespace, environment)
        try:
            merged = (await levels_of(self.kube, namespace, environment, graph_type, env)).merged(levels[level])
        except ApiError as error:
            passed_on(error, "reading the graphs", "graph")
        except (ValidationError, ValueError) as error:
            raise ApiProblem(409, "Invalid", f"the {graph_type!r} graph of cluster {environment} cannot be merged: "
                                             f"{' '.join(str(error).split())}") from None
        if call.query.get("origin", "false").lower() in ("", "1", "true", "yes"):
            return _json([{**task_to_fuel(t), "origin": merged.origin.get(t.id)} for t in merged.tasks])
        return _json([task_to_fuel(t) for t in merged.tasks])

    async def execute(self, call: Call) -> Response:
        """A GraphRun: `{cluster, graphs: [{type, nodes?, tasks?}], dry_run, noop_run, force, subgraphs, name?}`
        -> 202 `{name, namespace, cluster}`; 409 when a run is going on the cluster; 400 for nodes not in it."""
        from operators.graphs.run import others_running

        namespace = self._namespace(call)
        await self._authorize(call, "create", namespace, resource=GRAPH_RUN.plural)
        body = self._body(call, "{cluster, graphs: [{type, nodes?, tasks?}], dry_run?, noop_run?, force?, "
                                "subgraphs?}")
        environment = body.get("cluster", body.get("environment"))
        if not isinstance(environment, str) or not environment:
            bad_request("body.cluster: required, the environment to run on")
        graphs = body.get("graphs")
        if graphs is None and body.get("graph_type") is not None:
            graphs = [{"type": body["graph_type"]}]
        if not isinstance(graphs, list) or not graphs:
            bad_request("body.graphs: required, a list of {type, nodes?, tasks?}")
        spec = {"environment": environment, "graphs": graphs, "dryRun": body.get("dry_run", False),
                "noop": body.get("noop_run", body.get("noop", False)), "force": body.get("force", False),
                "subgraphs": _subgraphs(body.get("subgraphs"))}
        try:
            run = GraphRunSpec.model_validate(spec)
        except ValidationError as error:
            names = {"dryRun": "dry_run", "noop": "noop_run", "environment": "cluster"}
            bad_request("; ".join(f"body.{field_path(tuple(names.get(str(p), p) for p in e['loc']))}: {e['msg']}"
                                  for e in error.errors()))
        env = await self._environment(namespace, environment)
        known = {str(n.get("name")) for n in (env.get("spec") or {}).get("nodes") or []}
        for i, graph in enumerate(run.graphs):
            unknown = [n for n in graph.nodes or [] if n not in known]
            if unknown:
                bad_request(f"body.graphs[{i}].nodes: {', '.join(unknown)} not in cluster {environment} (its nodes: "
                            f"{', '.join(sorted(known)) or 'none'})")
        for k, sub in enumerate(run.subgraphs):
            for side, chosen in (("start", sub.start_nodes), ("end", sub.end_nodes)):
                unknown = [n for n in chosen or [] if n not in known]
                if unknown:
                    bad_request(f"body.subgraphs[{k}].{side}_nodes: {', '.join(unknown)} not in cluster {environment} "
                                f"(its nodes: {', '.join(sorted(known)) or 'none'})")
        try:
            have = environment_graph_types(await self._items(namespace), environment, env)
        except ValidationError:
            raise ApiProblem(409, "Invalid", f"cluster {environment} has an invalid spec (see its status)") from None
        for i, graph in enumerate(run.graphs):
            problem = no_such_type(environment, graph.type, have)
            if problem:
                bad_request(f"body.graphs[{i}].type: {problem}")
        busy = await others_running(self.kube, namespace, environment, "")
        if busy:
            raise ApiProblem(409, "Conflict", f"GraphRun {busy[0]} runs on cluster {environment}: one run at a time "
                                              "(abort it, or wait for it)")
        name = body.get("name")
        metadata: dict[str, Any] = {"namespace": namespace}
        if name is not None:
            if not isinstance(name, str) or not object_name_ok(name):
                bad_request(f"body.name: {name!r} is not a valid object name")
            metadata["name"] = name
        else:
            types = "-".join(g.type for g in run.graphs).lower().replace("_", "-")
            metadata["generateName"] = re.sub(r"[^a-z0-9-]", "-", f"{environment}-{types}")[:50].strip("-") + "-"
        obj = {"apiVersion": API_VERSION, "kind": GRAPH_RUN.kind, "metadata": metadata,
               "spec": run.model_dump(by_alias=True, mode="json", exclude_none=True)}
        created = await self._request("POST", custom_path(GRAPH_RUN.plural, namespace), obj, call)
        meta = created["metadata"]
        return _json({"name": meta["name"], "namespace": meta.get("namespace", namespace), "cluster": environment,
                      "uid": meta.get("uid"), "graphs": [g.type for g in run.graphs], "dry_run": run.dry_run},
                     status=202)


    # --- history --------------------------------------------------------------------------------

    async def history(self, call: Call) -> Response:
        """The environment's task instances across its runs, newest first (`operators.graphs.history`):
        `?node=`, `?task=`, `?type=`, `?state=`, `?run=` filter; `?limit=` (default 100, at most 1000) and
        `?continue=` (the last page's `continue`) page; `?format=csv` answers CSV (its header, then the
        page's rows; the next page's token in the `X-Continue` header). A caller who may list GraphRuns of the
        namespace may read it."""
        namespace = self._namespace(call)
        environment = call.params["owner"]
        await self._authorize(call, "list", namespace, resource=GRAPH_RUN.plural)
        state_dir = self.settings.runs_state_dir
        if state_dir is None:
            raise ApiProblem(503, "ServiceUnavailable", "this server was started without the runs' state directory "
                                                        "(stead operator serves it): the history cannot be read here")
        if not object_name_ok(environment):
            bad_request(f"path: {environment!r} is not an environment's name")
        state = call.query.get("state")
        if state is not None and state not in FINISHED:
            bad_request(f"query parameter state: one of {', '.join(FINISHED)}, not {state!r}")
        run = call.query.get("run")
        if run is not None and not object_name_ok(run):
            bad_request(f"query parameter run: {run!r} is not a GraphRun's name")
        before = None
        token = call.query.get("continue")
        if token:
            try:
                before = decode_token(token)
            except ValueError as error:
                bad_request(f"query parameter continue: {error}")
        fmt = call.query.get("format", "json")
        if fmt not in ("json", "csv"):
            bad_request(f"query parameter format: json or csv, not {fmt!r}")
        query = Query(node=self._query_name(call, "node", _NODE), task=self._query_name(call, "task", _TASK),
                      graph_type=self._query_name(call, "type", _TYPE), state=state, run=run,
                      limit=_count(call, "limit", 1, MAX_PAGE) or 100, before=before)
        # 404 naming the environments there; the history is this Environment's (its uid), never that of an
        # Environment of the same name that was there before (a namespace re-created may be another tenant's)
        found = await self._environment(namespace, environment)
        path = history_path(state_dir, namespace, environment, str(found["metadata"]["uid"]))
        page = await asyncio.to_thread(lambda: HistoryStore(path, create=False).read(query))
        if fmt == "csv":
            headers = {"X-Continue": page.next_token} if page.next_token else None
            return Response(200, to_csv(page.entries).encode(), "text/csv; charset=utf-8", headers)
        return _json({"cluster": environment, "namespace": namespace,
                      "entries": [e.to_json() for e in page.entries], "continue": page.next_token})

    # --- a run's output -------------------------------------------------------------------------

    async def _run_instances(self, call: Call) -> tuple[str, str, RunPaths, list[RunInstance]]:
        """(namespace, run, its files, its instances) for a caller who may get the GraphRun; 404 naming the
        run when it does not exist or has no plan here yet."""
        namespace = self._namespace(call)
        run = call.params["run"]
        if not object_name_ok(run):
            bad_request(f"path: {run!r} is not a GraphRun's name")
        await self._authorize(call, "get", namespace, run, resource=GRAPH_RUN.plural)
        found = await self._request("GET", custom_path(GRAPH_RUN.plural, namespace, run))
        if found is None:
            listed = await self._request("GET", custom_path(GRAPH_RUN.plural, namespace)) or {}
            names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])
            shown = ", ".join(names[-10:]) or "none"
            not_found("graphrun", f'graph run "{run}" not found in namespace "{namespace}" (runs here: {shown})')
        state_dir = self.settings.runs_state_dir
        if state_dir is None:
            raise ApiProblem(503, "ServiceUnavailable", "this server was started without the runs' state directory "
                                                        "(stead operator serves it): runs' output cannot be read here")
        paths = RunPaths(state_dir, str(found["metadata"]["uid"]))
        plan = await asyncio.to_thread(read_plan, paths.run_dir)
        if plan is None:
            state = (found.get("status") or {}).get("state") or "Pending"
            not_found("graphrun", f"graph run {run} ({state}) has no plan on this operator's volume: it is planned "
                                  "when it leaves Init; with several operator replicas, ask the one that runs it")
        return namespace, run, paths, instances(plan)

    def _query_name(self, call: Call, name: str, pattern: re.Pattern[str]) -> str | None:
        value = call.query.get(name)
        if value is not None and not pattern.match(value):
            bad_request(f"query parameter {name}: {value!r} is not a {name} name")
        return value

    async def run_outputs(self, call: Call) -> Response:
        """The run's task instances (`?node=`, `?task=`, `?type=` narrow them) and how many bytes of output
        each has stored."""
        namespace, run, paths, found = await self._run_instances(call)
        chosen = select(found, task=self._query_name(call, "task", _TASK), node=self._query_name(call, "node", _NODE),
                        graph_type=self._query_name(call, "type", _TYPE))

        def sizes() -> list[dict[str, Any]]:
            return [{"type": i.graph_type, "task": i.task, "node": i.node or None,
                     "bytes": output_size(output_file(paths, i))} for i in chosen]

        return _json({"run": run, "namespace": namespace, "instances": await asyncio.to_thread(sizes)})

    async def task_output(self, call: Call) -> Response:
        """One instance's output from `?offset=` (default 0), at most `?limit=` bytes (default and at most
        `PAGE_BYTES`): `{..., size, offset, next_offset, truncated, output}`; `next_offset` is where the next
        page starts (null at the end)."""
        namespace, run, paths, found = await self._run_instances(call)
        task = call.params["task"]
        if not _TASK.match(task):
            bad_request(f"path: {task!r} is not a task id")
        node = self._query_name(call, "node", _NODE)
        graph_type = self._query_name(call, "type", _TYPE)
        offset = _count(call, "offset", 0, None)
        limit = _count(call, "limit", 1, PAGE_BYTES) or PAGE_BYTES
        try:
            instance = find(found, run, task, node, graph_type)
            path = output_file(paths, instance)
        except NoSuchInstance as error:
            not_found(error.missing, error.message)
        except Ambiguous as error:
            bad_request(str(error))
        except ValueError as error:  # a plan file that names no runner instance: not followed anywhere
            raise ApiProblem(500, "Internal", f"graph run {run}: {error}") from None
        page = await asyncio.to_thread(read_page, path, offset or 0, limit)
        end = page.next_offset if page.next_offset is not None else page.size
        body: dict[str, Any] = {
            "run": run, "namespace": namespace, "type": instance.graph_type, "task": task,
            "node": instance.node or None, "size": page.size, "offset": page.offset, "next_offset": page.next_offset,
            "truncated": page.truncated, "output": page.text}
        if page.truncated:
            body["message"] = (f"truncated at {end - page.offset} bytes (bytes {page.offset}-{end} of {page.size}): "
                               f"ask again with offset={end}")
        return _json(body)


# --- what the API says about itself -------------------------------------------------------------------

_OWNED = PREFIX + "/{model}/{owner}/deployment_graphs/{type}/"
ROUTE_DOCS: tuple[RouteDoc, ...] = (
    ("GET", PREFIX + "/graphs/", "list the deployment graphs (?namespace=NS)"),
    ("POST", PREFIX + "/graphs/", "create a graph: {type, name?, relations: [{model, model_id}], tasks}"),
    ("GET", PREFIX + "/graphs/{name}/", "one graph: {id, name, type, relations, tasks} (tasks in Fuel's form)"),
    ("PUT", PREFIX + "/graphs/{name}/", "replace its verbose name and tasks: {name?, tasks}"),
    ("PATCH", PREFIX + "/graphs/{name}/", "change its verbose name or tasks: {name?, tasks?}"),
    ("DELETE", PREFIX + "/graphs/{name}/", "delete it"),
    ("GET", _OWNED, "the graph of a type of a release, cluster or plugin (model: releases|clusters|plugins)"),
    ("PUT", _OWNED, "create or replace that graph: {name?, tasks}"),
    ("PATCH", _OWNED, "change that graph: {name?, tasks?}"),
    ("GET", PREFIX + "/clusters/{env}/deployment_tasks/",
     "the merged tasks of a type (?graph_type=T; ?level=release|plugins|cluster: one level; ?origin)"),
    ("POST", PREFIX + "/graphs/execute/", "run graphs: {cluster, graphs: [{type, nodes?, tasks?}], dry_run, "
                                          "noop_run, force, subgraphs} -> 202 {name} (a GraphRun)"),
    ("GET", PREFIX + "/clusters/{env}/history/", "task instances across runs, newest first (?node, ?task, ?type, "
                                                 "?state, ?run; ?limit, ?continue; ?format=csv)"),
    ("GET", PREFIX + "/graphruns/{run}/output/", "a run's task instances and their output sizes (?node, ?task, "
                                                 "?type)"),
    ("GET", PREFIX + "/graphruns/{run}/output/{task}/", "a task instance's whole output (?node, ?type), a page "
                                                        "at a time (?offset, ?limit)"),
)


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/GraphError"}}}}


def _graph(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DeploymentGraph"}}}}


_NS = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
       "description": "The Kubernetes namespace (default: the server's)."}


def _path_param(name: str, description: str, enum: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if enum:
        schema["enum"] = enum
    return {"name": name, "in": "path", "required": True, "schema": schema, "description": description}


_COMMON = {"401": _error("No valid credentials."), "403": _error("Not permitted by RBAC."),
           "503": _error("The Kubernetes API server or the authentication backend is unreachable.")}
_WRITE = {"400": _error("Malformed body: the message names the task and field."),
          "404": _error("No such graph or cluster (see notFound)."),
          "409": _error("A second graph of an owner and type, or a concurrent write."),
          "422": _error("Refused by the admission webhook (its message)."), **_COMMON}
_TASKS_BODY = {"required": True, "content": {"application/json": {"schema": {"type": "object", "properties": {
    "name": {"type": "string"}, "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/FuelTask"}}}}}}}
OPENAPI_PATHS: dict[str, Any] = {
    PREFIX + "/graphs/": {
        "parameters": [_NS],
        "get": {"summary": "List the deployment graphs of the namespace.", "responses": {"200": {
            "description": "The graphs.", "content": {"application/json": {"schema": {
                "type": "array", "items": {"$ref": "#/components/schemas/DeploymentGraph"}}}}}, **_COMMON}},
        "post": {"summary": "Create a graph (a DeploymentGraph object).",
                 "requestBody": {"required": True, "content": {"application/json": {"schema": {
                     "$ref": "#/components/schemas/DeploymentGraph"}}}},
                 "responses": {"201": _graph("Created."), **_WRITE}},
    },
    PREFIX + "/graphs/{name}/": {
        "parameters": [_path_param("name", "The DeploymentGraph's name (a graph's id)."), _NS],
        "get": {"summary": "One graph.", "responses": {"200": _graph("The graph."),
                                                       "404": _error("No such graph."), **_COMMON}},
        "put": {"summary": "Replace the verbose name and tasks.", "requestBody": _TASKS_BODY,
                "responses": {"200": _graph("The graph now."), **_WRITE}},
        "patch": {"summary": "Change the verbose name or the tasks.", "requestBody": _TASKS_BODY,
                  "responses": {"200": _graph("The graph now."), **_WRITE}},
        "delete": {"summary": "Delete the graph.", "responses": {"204": {"description": "Deleted."}, **_WRITE}},
    },
    _OWNED: {
        "parameters": [_path_param("model", "What owns the graph.", ["releases", "clusters", "plugins"]),
                       _path_param("owner", "The release, environment (cluster) or plugin."),
                       _path_param("type", "The graph type."), _NS],
        "get": {"summary": "The graph of this owner and type.",
                "responses": {"200": _graph("The graph."), "404": _error("None (the owner's types are named)."),
                              **_COMMON}},
        "put": {"summary": "Create or replace the graph of this owner and type.", "requestBody": _TASKS_BODY,
                "responses": {"200": _graph("Replaced."), "201": _graph("Created."), **_WRITE}},
        "patch": {"summary": "Change the graph of this owner and type.", "requestBody": _TASKS_BODY,
                  "responses": {"200": _graph("The graph now."), **_WRITE}},
    },
    PREFIX + "/clusters/{env}/deployment_tasks/": {
        "parameters": [_path_param("env", "The environment (cluster)."), _NS,
                       {"name": "graph_type", "in": "query", "required": False, "schema": {"type": "string"},
                        "description": "The graph type (default 'default'); also ?type="},
                       {"name": "level", "in": "query", "required": False,
                        "schema": {"type": "string", "enum": ["all", "release", "plugins", "cluster"]},
                        "description": "One level of the merge only (default all)."},
                       {"name": "origin", "in": "query", "required": False, "schema": {"type": "boolean"},
                        "description": "Add to each task the level it came from (`origin`)."}],
        "get": {"summary": "The merged tasks (release < enabled plugins < cluster, whole-task replacement), in "
                           "order.",
                "responses": {"200": {"description": "The tasks.", "content": {"application/json": {"schema": {
                    "type": "array", "items": {"$ref": "#/components/schemas/FuelTask"}}}}},
                    "404": _error("No such cluster."), "409": _error("Graphs that cannot be merged."), **_COMMON}},
    },
    PREFIX + "/graphs/execute/": {
        "parameters": [_NS],
        "post": {"summary": "Run graphs on a cluster: creates a GraphRun (follow it with stead graph status).",
                 "requestBody": {"required": True, "content": {"application/json": {"schema": {
                     "type": "object", "required": ["cluster", "graphs"], "properties": {
                         "cluster": {"type": "string"}, "name": {"type": "string"},
                         "graphs": {"type": "array", "items": {"type": "object", "properties": {
                             "type": {"type": "string"}, "nodes": {"type": "array", "items": {"type": "string"}},
                             "tasks": {"type": "array", "items": {"type": "string"}}}}},
                         "dry_run": {"type": "boolean"}, "noop_run": {"type": "boolean"},
                         "force": {"type": "boolean"},
                         "subgraphs": {"type": "array", "items": {"type": "object", "properties": {
                             "start": {"type": "array", "items": {"type": "string"},
                                       "description": "Task ids or /regex/; an entry may end with /NODES "
                                                      "(netconfig/node-1,node-2), Fuel's node range."},
                             "end": {"type": "array", "items": {"type": "string"}},
                             "start_nodes": {"type": "array", "items": {"type": "string"}},
                             "end_nodes": {"type": "array", "items": {"type": "string"}}}}}}}}}},
                 "responses": {"202": {"description": "Accepted: the GraphRun's name.", "content": {
                     "application/json": {"schema": {"type": "object", "properties": {
                         "name": {"type": "string"}, "namespace": {"type": "string"},
                         "cluster": {"type": "string"}}}}}},
                     "400": _error("Malformed body, nodes not in the cluster, or a type it has no graph of (its "
                                   "types are named)."),
                     "404": _error("No such cluster."),
                     "409": _error("A run is going on the cluster (named)."), **_COMMON}},
    },
}
_RUN = _path_param("run", "The GraphRun's name.")
_FILTERS = [{"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": text}
            for name, text in (("node", "The node (needed when the task runs on several)."),
                               ("type", "The graph type (needed when the task is in several of the run's types)."))]
OPENAPI_PATHS[PREFIX + "/graphruns/{run}/output/"] = {
    "parameters": [_RUN, _NS, *_FILTERS,
                   {"name": "task", "in": "query", "required": False, "schema": {"type": "string"},
                    "description": "Only this task's instances."}],
    "get": {"summary": "The run's task instances, with the bytes of output each stored (a caller that may get the "
                       "GraphRun).",
            "responses": {"200": {"description": "The instances.", "content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "run": {"type": "string"}, "namespace": {"type": "string"},
                    "instances": {"type": "array", "items": {"type": "object", "properties": {
                        "type": {"type": "string"}, "task": {"type": "string"},
                        "node": {"type": "string", "nullable": True}, "bytes": {"type": "integer"}}}}}}}}},
                "404": _error("No such run, or no plan of it on this operator's volume."),
                "503": _error("This server has no runs' files (or the API server is unreachable).")} | {
                k: v for k, v in _COMMON.items() if k != "503"}},
}
OPENAPI_PATHS[PREFIX + "/graphruns/{run}/output/{task}/"] = {
    "parameters": [_RUN, _path_param("task", "The task's id."), _NS, *_FILTERS,
                   {"name": "offset", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
                    "description": "The first byte to return (default 0)."},
                   {"name": "limit", "in": "query", "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": PAGE_BYTES},
                    "description": f"At most this many bytes (default and most: {PAGE_BYTES})."}],
    "get": {"summary": "A task instance's whole output, masked as stored, a page at a time.",
            "responses": {"200": {"description": "A page: next_offset is where the next starts (null: the end).",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/OutputPage"}}}},
                          "400": _error("A malformed name or number, or a task on several nodes with none named."),
                          "404": _error("No such run, task, node or type (see notFound; the message says what "
                                        "there is)."), **_COMMON}},
}
OPENAPI_PATHS[PREFIX + "/clusters/{env}/history/"] = {
    "parameters": [_path_param("env", "The environment (cluster)."), _NS,
                   *({"name": name, "in": "query", "required": False, "schema": {"type": "string"},
                      "description": text} for name, text in (
                       ("node", "Only this node's instances."), ("task", "Only this task's instances."),
                       ("type", "Only this graph type's instances."),
                       ("state", "Only instances that ended so: success, failure or aborted."),
                       ("run", "Only this GraphRun's instances."),
                       ("continue", "The `continue` of the previous page (CSV: its X-Continue header)."))),
                   {"name": "limit", "in": "query", "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                    "description": "Entries per page (default 100)."},
                   {"name": "format", "in": "query", "required": False,
                    "schema": {"type": "string", "enum": ["json", "csv"]}, "description": "json (default) or csv."}],
    "get": {"summary": "Task instances of the environment's runs, newest first (a caller that may list GraphRuns).",
            "responses": {"200": {"description": "A page of entries; `continue` is null on the last page.",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/HistoryPage"}},
                                      "text/csv": {"schema": {"type": "string"}}}},
                          "400": _error("A malformed filter, limit or continue token."),
                          "404": _error("No such cluster (see notFound)."), **_COMMON}},
}
OPENAPI_SCHEMAS: dict[str, Any] = {
    "HistoryPage": {"type": "object", "properties": {
        "cluster": {"type": "string"}, "namespace": {"type": "string"},
        "continue": {"type": "string", "nullable": True},
        "entries": {"type": "array", "items": {"type": "object", "properties": {
            "seq": {"type": "integer"}, "run": {"type": "string"}, "runUid": {"type": "string"},
            "step": {"type": "string"}, "type": {"type": "string"}, "task": {"type": "string"},
            "node": {"type": "string", "nullable": True},
            "state": {"type": "string", "enum": ["success", "failure", "aborted"]},
            "started": {"type": "string", "nullable": True}, "finished": {"type": "string", "nullable": True},
            "duration": {"type": "number", "nullable": True}, "attempts": {"type": "integer"},
            "reason": {"type": "string"},
            "noop": {"type": "object", "properties": {
                "wouldChange": {"type": "integer"}, "more": {"type": "integer"},
                "resources": {"type": "array", "items": {"type": "string"}}}}}}}}},
    "OutputPage": {"type": "object", "properties": {
        "run": {"type": "string"}, "namespace": {"type": "string"}, "type": {"type": "string"},
        "task": {"type": "string"}, "node": {"type": "string", "nullable": True},
        "size": {"type": "integer", "description": "Bytes stored in all."},
        "offset": {"type": "integer"}, "next_offset": {"type": "integer", "nullable": True},
        "truncated": {"type": "boolean", "description": "More follows from next_offset."},
        "message": {"type": "string", "description": "When truncated: where it was cut and how to go on."},
        "output": {"type": "string"}}},
    "GraphError": {"type": "object", "required": ["code", "error", "message"], "properties": {
        "code": {"type": "integer"}, "error": {"type": "string"}, "message": {"type": "string"},
        "notFound": {"type": "string", "enum": ["graph", "cluster", "route", "graphrun", "task", "node", "type"]}}},
    "FuelTask": {"type": "object", "required": ["id", "type"], "additionalProperties": True,
                 "description": "A task as Fuel's task files write it (id, type, version, roles/groups/tags, "
                                "requires, required_for, cross-depends, cross-depended-by, condition, parameters, "
                                "strategy, ...); unknown keys are kept.",
                 "properties": {"id": {"type": "string"}, "type": {"type": "string"}}},
    "DeploymentGraph": {"type": "object", "properties": {
        "id": {"type": "string", "description": "The DeploymentGraph's name."},
        "name": {"type": "string", "nullable": True, "description": "The verbose name."},
        "type": {"type": "string"}, "namespace": {"type": "string"}, "ready": {"type": "boolean"},
        "relations": {"type": "array", "items": {"type": "object", "properties": {
            "model": {"type": "string", "enum": ["cluster", "release", "plugin"]}, "model_id": {"type": "string"},
            "type": {"type": "string"}}}},
        "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/FuelTask"}}}},
}
