"""The deployment graphs API's handlers (`GraphsApi`) and its routes, declared once (see the package)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from operators import API_VERSION
from operators.environment.models import ENVIRONMENT
from operators.graphs.api import openapi
from operators.graphs.api.graphs import (
    KIND_OF,
    MERGE_PATCH,
    MODEL_OF,
    NODE_PATTERN,
    TASK_PATTERN,
    TYPE_PATTERN,
    count_param,
    environment_graph_types,
    graph_view,
    levels_of,
    save_graph,
    subgraphs_of,
    tasks_from_fuel,
)
from operators.graphs.api.openapi import PREFIX
from operators.graphs.fuel import FuelFormatError, task_to_fuel
from operators.graphs.history import (
    FINISHED,
    MAX_PAGE,
    HistoryStore,
    Query,
    decode_token,
    history_path,
    to_csv,
)
from operators.graphs.kept import no_such_type
from operators.graphs.models import (
    DEPLOYMENT_GRAPH,
    GRAPH_RUN,
    GraphRunSpec,
    Task,
)
from operators.graphs.objects import find_graph, graph_items, owner_of, type_of
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
from operators.runtime import (
    ApiError,
    ApiProblem,
    Call,
    ExtensionBase,
    Operation,
    Response,
    Route,
    RouteTable,
    bad_request,
    custom_path,
    field_path,
    json_body,
    json_response,
    not_found,
    object_name_ok,
    passed_on,
)
from pipelines.paths import RunPaths


class GraphsApi(ExtensionBase):
    """The handlers, over the API server's client (the operator's credentials) and the authenticator that
    checks callers (their permissions are reviewed per request)."""

    resource = DEPLOYMENT_GRAPH.plural

    # --- the extension ------------------------------------------------------------------------

    def declared(self) -> RouteTable:
        return ROUTES

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
        if not isinstance(value, str) or not TYPE_PATTERN.match(value):
            bad_request(f"{where}: a graph type is 1 to 63 letters, digits, '-' or '_', not {value!r}")
        return value

    @staticmethod
    def _body(call: Call, what: str) -> dict[str, Any]:
        body = json_body(call)
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
            await self.authorize(call, verb, namespace)
            names = [str(i["metadata"]["name"]) for i in await self._items(namespace)]
            not_found("graph", f'deployment graph "{name}" not found in namespace "{namespace}" (graphs here: '
                                f"{', '.join(names) or 'none'})")
        await self.authorize(call, verb, namespace, name)
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
        namespace = self.namespace(call)
        await self.authorize(call, "list", namespace)
        return json_response([graph_view(i) for i in await self._items(namespace)])

    async def create(self, call: Call) -> Response:
        namespace = self.namespace(call)
        await self.authorize(call, "create", namespace)
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
        return json_response(graph_view(created), status=201)

    async def get(self, call: Call) -> Response:
        namespace = self.namespace(call)
        return json_response(graph_view(await self._named(call, "get", namespace)))

    async def put(self, call: Call) -> Response:
        return await self._update(call, replace=True)

    async def patch(self, call: Call) -> Response:
        return await self._update(call, replace=False)

    async def _update(self, call: Call, replace: bool) -> Response:
        """PUT: the verbose name and the tasks as given (absent: none); PATCH: those given. The type and the
        owner stay (a graph of another owner or type is another graph: POST it)."""
        namespace = self.namespace(call)
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
        return json_response(graph_view(updated))

    async def delete(self, call: Call) -> Response:
        namespace = self.namespace(call)
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
        namespace = self.namespace(call)
        kind = KIND_OF[call.params["model"].removesuffix("s")]
        owner, graph_type = call.params["owner"], self._type(call.params["type"], "path: the graph type")
        await self.authorize(call, verb, namespace)
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
        return json_response(graph_view(found))

    async def put_owned(self, call: Call) -> Response:
        """Create the graph of that owner and type, or replace its tasks and verbose name."""
        body = self._body(call, "{name?, tasks}")
        tasks, name = self._tasks(body, required=True), self._verbose(body)
        namespace, kind, owner, graph_type, items = await self._owned(call, "update")
        existed = find_graph(items, kind, owner, graph_type) is not None
        if not existed:
            await self.authorize(call, "create", namespace)
        written, created = await self._write(call, namespace, kind, owner, graph_type, tasks, name or "", items)
        return json_response(graph_view(written), status=201 if created else 200)

    async def patch_owned(self, call: Call) -> Response:
        body = self._body(call, "{name?, tasks?}")
        tasks, name = self._tasks(body, required=False), self._verbose(body)
        namespace, kind, owner, graph_type, items = await self._owned(call, "update")
        if find_graph(items, kind, owner, graph_type) is None:
            types = sorted(type_of(i) for i in items if owner_of(i) == (kind, owner))
            not_found("graph", f"{MODEL_OF[kind]} {owner} has no {graph_type!r} graph in namespace \"{namespace}\" "
                                f"to patch (its graph types: {', '.join(types) or 'none'}; PUT creates one)")
        written, _ = await self._write(call, namespace, kind, owner, graph_type, tasks, name, items)
        return json_response(graph_view(written))

    # --- merged tasks and execution -----------------------------------------------------------------

    async def deployment_tasks(self, call: Call) -> Response:
        """The merged tasks of a type (`?graph_type=`, also `?type=`; default `default`) in Fuel's form, in
        order; `?level=release|plugins|cluster` gives that level alone; `?origin` adds to each task the level it
        came from (not by default: a task's unknown keys are kept, so a body sent back would keep it too)."""
        namespace = self.namespace(call)
        await self.authorize(call, "list", namespace)
        graph_type = self._type(call.query.get("graph_type", call.query.get("type")), "query parameter graph_type")
        level = call.query.get("level", "all")
        levels = {"all": "all", "release": "release", "plugins": "plugins", "cluster": "environment",
                  "environment": "environment"}
        if level not in levels:
            bad_request(f"query parameter level: one of all, release, plugins, cluster, not {level!r}")
        environment = call.params["env"]
        env = await self._environment(namespace, environment)
        try:
            merged = (await levels_of(self.kube, namespace, environment, graph_type, env)).merged(levels[level])
        except ApiError as error:
            passed_on(error, "reading the graphs", "graph")
        except (ValidationError, ValueError) as error:
            raise ApiProblem(409, "Invalid", f"the {graph_type!r} graph of cluster {environment} cannot be merged: "
                                             f"{' '.join(str(error).split())}") from None
        if call.query.get("origin", "false").lower() in ("", "1", "true", "yes"):
            return json_response([{**task_to_fuel(t), "origin": merged.origin.get(t.id)} for t in merged.tasks])
        return json_response([task_to_fuel(t) for t in merged.tasks])

    async def execute(self, call: Call) -> Response:
        """A GraphRun: `{cluster, graphs: [{type, nodes?, tasks?}], dry_run, noop_run, force, subgraphs, name?}`
        -> 202 `{name, namespace, cluster}`; 409 when a run is going on the cluster; 400 for nodes not in it."""
        from operators.graphs.run import others_running

        namespace = self.namespace(call)
        await self.authorize(call, "create", namespace, resource=GRAPH_RUN.plural)
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
                "subgraphs": subgraphs_of(body.get("subgraphs"))}
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
        return json_response({"name": meta["name"], "namespace": meta.get("namespace", namespace),
                              "cluster": environment, "uid": meta.get("uid"), "graphs": [g.type for g in run.graphs],
                              "dry_run": run.dry_run}, status=202)


    # --- history --------------------------------------------------------------------------------

    async def history(self, call: Call) -> Response:
        """The environment's task instances across its runs, newest first (`operators.graphs.history`):
        `?node=`, `?task=`, `?type=`, `?state=`, `?run=` filter; `?limit=` (default 100, at most 1000) and
        `?continue=` (the last page's `continue`) page; `?format=csv` answers CSV (its header, then the
        page's rows; the next page's token in the `X-Continue` header). A caller who may list GraphRuns of the
        namespace may read it."""
        namespace = self.namespace(call)
        environment = call.params["env"]
        await self.authorize(call, "list", namespace, resource=GRAPH_RUN.plural)
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
        query = Query(node=self._query_name(call, "node", NODE_PATTERN),
                      task=self._query_name(call, "task", TASK_PATTERN),
                      graph_type=self._query_name(call, "type", TYPE_PATTERN), state=state, run=run,
                      limit=count_param(call, "limit", 1, MAX_PAGE) or 100, before=before)
        # 404 naming the environments there; the history is this Environment's (its uid), never that of an
        # Environment of the same name that was there before (a namespace re-created may be another tenant's)
        found = await self._environment(namespace, environment)
        path = history_path(state_dir, namespace, environment, str(found["metadata"]["uid"]))
        page = await asyncio.to_thread(lambda: HistoryStore(path, create=False).read(query))
        if fmt == "csv":
            headers = {"X-Continue": page.next_token} if page.next_token else None
            return Response(200, to_csv(page.entries).encode(), "text/csv; charset=utf-8", headers)
        return json_response({"cluster": environment, "namespace": namespace,
                      "entries": [e.to_json() for e in page.entries], "continue": page.next_token})

    # --- a run's output -------------------------------------------------------------------------

    async def _run_instances(self, call: Call) -> tuple[str, str, RunPaths, list[RunInstance]]:
        """(namespace, run, its files, its instances) for a caller who may get the GraphRun; 404 naming the
        run when it does not exist or has no plan here yet."""
        namespace = self.namespace(call)
        run = call.params["run"]
        if not object_name_ok(run):
            bad_request(f"path: {run!r} is not a GraphRun's name")
        await self.authorize(call, "get", namespace, run, resource=GRAPH_RUN.plural)
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
        chosen = select(found, task=self._query_name(call, "task", TASK_PATTERN),
                        node=self._query_name(call, "node", NODE_PATTERN),
                        graph_type=self._query_name(call, "type", TYPE_PATTERN))

        def sizes() -> list[dict[str, Any]]:
            return [{"type": i.graph_type, "task": i.task, "node": i.node or None,
                     "bytes": output_size(output_file(paths, i))} for i in chosen]

        return json_response({"run": run, "namespace": namespace, "instances": await asyncio.to_thread(sizes)})

    async def task_output(self, call: Call) -> Response:
        """One instance's output from `?offset=` (default 0), at most `?limit=` bytes (default and at most
        `PAGE_BYTES`): `{..., size, offset, next_offset, truncated, output}`; `next_offset` is where the next
        page starts (null at the end)."""
        namespace, run, paths, found = await self._run_instances(call)
        task = call.params["task"]
        if not TASK_PATTERN.match(task):
            bad_request(f"path: {task!r} is not a task id")
        node = self._query_name(call, "node", NODE_PATTERN)
        graph_type = self._query_name(call, "type", TYPE_PATTERN)
        offset = count_param(call, "offset", 0, None)
        limit = count_param(call, "limit", 1, PAGE_BYTES) or PAGE_BYTES
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
        return json_response(body)

OWNED = PREFIX + "/{model}/{owner}/deployment_graphs/{type}/"
ROUTES = RouteTable((
    Route(PREFIX + "/graphs/", {
        "GET": Operation(GraphsApi.list_graphs, "list the deployment graphs (?namespace=NS)", openapi.GRAPHS["get"]),
        "POST": Operation(GraphsApi.create, "create a graph: {type, name?, relations: [{model, model_id}], tasks}",
                          openapi.GRAPHS["post"])}, parameters=openapi.GRAPHS["parameters"]),
    Route(PREFIX + "/graphs/{name}/", {
        "GET": Operation(GraphsApi.get, "one graph: {id, name, type, relations, tasks} (tasks in Fuel's form)",
                         openapi.GRAPH["get"]),
        "PUT": Operation(GraphsApi.put, "replace its verbose name and tasks: {name?, tasks}", openapi.GRAPH["put"]),
        "PATCH": Operation(GraphsApi.patch, "change its verbose name or tasks: {name?, tasks?}",
                           openapi.GRAPH["patch"]),
        "DELETE": Operation(GraphsApi.delete, "delete it", openapi.GRAPH["delete"])},
          parameters=openapi.GRAPH["parameters"]),
    Route(OWNED, {
        "GET": Operation(GraphsApi.get_owned, "the graph of a type of a release, cluster or plugin (model: "
                                              "releases|clusters|plugins)", openapi.OWNED["get"]),
        "PUT": Operation(GraphsApi.put_owned, "create or replace that graph: {name?, tasks}", openapi.OWNED["put"]),
        "PATCH": Operation(GraphsApi.patch_owned, "change that graph: {name?, tasks?}", openapi.OWNED["patch"])},
          parameters=openapi.OWNED["parameters"]),
    Route(PREFIX + "/clusters/{env}/deployment_tasks/", {"GET": Operation(
        GraphsApi.deployment_tasks, "the merged tasks of a type (?graph_type=T; ?level=release|plugins|cluster: one "
                                    "level; ?origin)", openapi.DEPLOYMENT_TASKS["get"])},
          parameters=openapi.DEPLOYMENT_TASKS["parameters"]),
    Route(PREFIX + "/graphs/execute/", {"POST": Operation(
        GraphsApi.execute, "run graphs: {cluster, graphs: [{type, nodes?, tasks?}], dry_run, noop_run, force, "
                           "subgraphs} -> 202 {name} (a GraphRun)", openapi.EXECUTE["post"])},
          parameters=openapi.EXECUTE["parameters"]),
    Route(PREFIX + "/clusters/{env}/history/", {"GET": Operation(
        GraphsApi.history, "task instances across runs, newest first (?node, ?task, ?type, ?state, ?run; ?limit, "
                           "?continue; ?format=csv)", openapi.HISTORY["get"])},
          parameters=openapi.HISTORY["parameters"]),
    Route(PREFIX + "/graphruns/{run}/output/", {"GET": Operation(
        GraphsApi.run_outputs, "a run's task instances and their output sizes (?node, ?task, ?type)",
        openapi.OUTPUTS["get"])}, parameters=openapi.OUTPUTS["parameters"]),
    Route(PREFIX + "/graphruns/{run}/output/{task}/", {"GET": Operation(
        GraphsApi.task_output, "a task instance's whole output (?node, ?type), a page at a time (?offset, ?limit)",
        openapi.OUTPUT["get"])}, parameters=openapi.OUTPUT["parameters"]),
), openapi.SCHEMAS)
"""The deployment graphs' routes, declared once (`operators.runtime.api.routes`)."""
ROUTE_DOCS = ROUTES.docs()
