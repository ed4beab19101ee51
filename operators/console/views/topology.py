"""The console's topology part (issue 29): its routes, thin. Every read is the signed-in user's (`call.kube`,
`call.stead`), so their RBAC decides what is shown; the shaping is pure, in `topology_app` (an App's
entities and dependencies), `config_shape` (an Environment's levels, effective values and version diffs)
and `plan_shape` (a graph type's dry plan over chosen nodes).

    GET /console/api/app-topology/{namespace}/{name}              an App's topology, laid out
    GET /console/api/config/{namespace}/{name}                     an Environment's points, layers, resources
    GET /console/api/config/{namespace}/{name}/effective?resource=R&level=L   effective values, traced
    GET /console/api/config/{namespace}/{name}/history?resource=R&level=L&kind=K   a layer's kept versions
    GET /console/api/config/{namespace}/{name}/diff?resource=R&level=L&kind=K&from=N&to=M   their diff
    GET /console/api/plan/{namespace}/{name}                       the environments a DeploymentGraph plans on
    GET /console/api/plan/{namespace}/{name}/dry?environment=E&nodes=a,b[&tasks=t,u]   the dry plan, laid out
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from operators.calm.models import APP, BLUEPRINT
from operators.config.levels import LevelError
from operators.config.repository import KubeConfigRepository, Snapshot, Unavailable
from operators.console.views.config_shape import (
    effective_view,
    environment_view,
    parse_point,
    values_api_path,
    version_diff,
)
from operators.console.views.plan_shape import environments_taking, node_data, plan_payload, plan_view
from operators.console.views.topology_app import app_topology
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute
from operators.environment.models import ENVIRONMENT, EnvironmentSpec
from operators.graphs.merge import MergeError
from operators.graphs.models import DEPLOYMENT_GRAPH
from operators.graphs.output import PLAN_FILE
from operators.graphs.planner import PlanFailed, plan_in_process
from operators.graphs.run import source_graphs, values_by_node
from operators.runtime import ApiError, Objects

API = "/console/api"


# --- an App -----------------------------------------------------------------------------------------------


async def app(call: ConsoleCall) -> Any:
    namespace, name = call.params["namespace"], call.params["name"]
    objects = Objects(call.kube)
    found = await objects.get(APP, namespace, name)
    blueprint = None
    if not (found.get("status") or {}).get("snapshot"):
        with_name = str((found.get("spec") or {}).get("blueprint") or "")
        try:
            blueprint = await objects.find(BLUEPRINT, namespace, with_name) if with_name else None
        except ApiError as error:  # the App is readable, its Blueprint not: the topology says it could not be read
            if error.status not in (403, 404):
                raise
    return app_topology(found, blueprint)


# --- an Environment's configuration ----------------------------------------------------------------------


def _required(call: ConsoleCall, *names: str) -> list[str]:
    missing = [n for n in names if not call.query.get(n)]
    if missing:
        raise ConsoleError(400, f"missing query parameter(s): {', '.join(missing)}")
    return [call.query[n] for n in names]


async def _snapshot(call: ConsoleCall) -> Snapshot:
    """The Environment's configuration as the user may read it (their 403 passed on as such)."""
    namespace, name = call.params["namespace"], call.params["name"]
    try:
        snapshot = await KubeConfigRepository(call.kube).snapshot(namespace, name)
    except Unavailable as error:
        cause = error.__cause__
        raise ConsoleError(cause.status if isinstance(cause, ApiError) else 502, str(error)) from None
    if snapshot is None:
        raise ConsoleError(404, f"no Environment {name} in namespace {namespace}")
    return snapshot


async def environment(call: ConsoleCall) -> Any:
    return environment_view(await _snapshot(call))


def _point(call: ConsoleCall, snapshot: Snapshot) -> Any:
    try:
        return parse_point(call.query.get("level", ""), snapshot)
    except LevelError as error:
        raise ConsoleError(400, f"level: {error}") from None


async def effective(call: ConsoleCall) -> Any:
    (resource,) = _required(call, "resource")
    snapshot = await _snapshot(call)
    return effective_view(snapshot, resource, _point(call, snapshot))


async def _layer(call: ConsoleCall) -> tuple[str, str, str, Any]:
    """(resource, level text, kind, the layer's API path) of the query."""
    resource, kind = _required(call, "resource", "kind")
    if kind not in ("values", "overrides"):
        raise ConsoleError(400, "kind: values or overrides")
    snapshot = await _snapshot(call)
    point = _point(call, snapshot)
    return resource, call.query.get("level") or "(root)", kind, values_api_path(snapshot.name, point, resource, kind)


async def history(call: ConsoleCall) -> Any:
    *_, path = await _layer(call)
    try:
        query = {"namespace": call.params["namespace"], "history": ""}
        return await call.needs_stead().request("GET", path, params=query)
    except ApiError as error:
        if error.status == 404:
            return {"object": None, "current": None, "versions": [], "message": error.message}
        raise


def _number(call: ConsoleCall, name: str) -> int:
    text = call.query.get(name, "")
    if not text.isdigit():
        raise ConsoleError(400, f"{name}: a version number")
    return int(text)


async def diff(call: ConsoleCall) -> Any:
    resource, level, kind, path = await _layer(call)
    old, new = _number(call, "from"), _number(call, "to")
    stead = call.needs_stead()
    namespace = call.params["namespace"]
    first, second = await asyncio.gather(
        stead.request("GET", path, params={"namespace": namespace, "version": str(old)}),
        stead.request("GET", path, params={"namespace": namespace, "version": str(new)}))
    return version_diff(resource, level, kind, (old, first), (new, second))


# --- a graph type's dry plan ------------------------------------------------------------------------------


async def plan_choices(call: ConsoleCall) -> Any:
    namespace, name = call.params["namespace"], call.params["name"]
    objects = Objects(call.kube)
    graph = await objects.get(DEPLOYMENT_GRAPH, namespace, name)
    return {"type": (graph.get("spec") or {}).get("type") or "default",
            "environments": environments_taking(graph, await objects.list(ENVIRONMENT, namespace))}


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n for n in text.split(",") if n]


async def dry_plan(call: ConsoleCall) -> Any:
    namespace, name = call.params["namespace"], call.params["name"]
    (environment_name,) = _required(call, "environment")
    objects = Objects(call.kube)
    graph = await objects.get(DEPLOYMENT_GRAPH, namespace, name)
    graph_type = str((graph.get("spec") or {}).get("type") or "default")
    env_body = await objects.get(ENVIRONMENT, namespace, environment_name)
    env = EnvironmentSpec.model_validate(env_body.get("spec") or {})
    nodes = _names(call.query.get("nodes"))
    if nodes is not None and not nodes:
        raise ConsoleError(400, "nodes: choose at least one node")
    snapshot = await _snapshot_of(call, namespace, environment_name)
    data = node_data(env, values_by_node(env, snapshot))
    generation = int((env_body.get("metadata") or {}).get("generation") or 0)
    try:
        payload = plan_payload(graph_type, environment_name, env, generation,
                               await source_graphs(call.kube, namespace), data, nodes, _names(call.query.get("tasks")))
    except MergeError as error:
        raise ConsoleError(422, f"the {graph_type!r} graphs of environment {environment_name} do not merge: "
                           f"{str(error)[:2048]}") from None
    document = await _planned(payload)
    return {"type": graph_type, "environment": environment_name, "lastRun": None,
            **plan_view(document, nodes if nodes is not None else [n.name for n in env.nodes])}


async def _snapshot_of(call: ConsoleCall, namespace: str, environment_name: str) -> Snapshot | None:
    try:
        return await KubeConfigRepository(call.kube).snapshot(namespace, environment_name)
    except Unavailable as error:  # the conditions read the configuration: no plan without it
        cause = error.__cause__
        raise ConsoleError(cause.status if isinstance(cause, ApiError) else 502,
                           f"the plan's conditions read the nodes' configuration: {error}") from None


async def _planned(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The planner's document for `payload`, made by the operator's planner process in a directory of its
    own, removed after."""
    directory = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="stead-dry-plan-"))
    try:
        async def variables() -> dict[str, str]:
            return {"ssh_known_hosts": ""}

        try:
            await plan_in_process(payload, directory / PLAN_FILE, variables)
        except PlanFailed as error:
            raise ConsoleError(422, error.message) from None
        text = await asyncio.to_thread((directory / PLAN_FILE).read_text)
        document: dict[str, Any] = json.loads(text)
        return document
    finally:
        await asyncio.to_thread(shutil.rmtree, directory, True)


ROUTES: tuple[ConsoleRoute, ...] = (
    ConsoleRoute("GET", API + "/app-topology/{namespace}/{name}", app),
    ConsoleRoute("GET", API + "/config/{namespace}/{name}", environment),
    ConsoleRoute("GET", API + "/config/{namespace}/{name}/effective", effective),
    ConsoleRoute("GET", API + "/config/{namespace}/{name}/history", history),
    ConsoleRoute("GET", API + "/config/{namespace}/{name}/diff", diff),
    ConsoleRoute("GET", API + "/plan/{namespace}/{name}", plan_choices),
    ConsoleRoute("GET", API + "/plan/{namespace}/{name}/dry", dry_plan),
)
