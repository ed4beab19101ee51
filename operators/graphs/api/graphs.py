"""What the graph routes and `stead graph` share (`operators.graphs.cli`): Fuel's graphs read from and
written to DeploymentGraph objects, the merged levels of an environment, and the parameters the routes
check."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from operators import API_VERSION
from operators.environment.models import EnvironmentSpec
from operators.graphs.fuel import FuelFormatError, task_from_fuel, task_to_fuel
from operators.graphs.kept import graph_types
from operators.graphs.merge import MergedGraph, merge_graphs
from operators.graphs.models import (
    DEPLOYMENT_GRAPH,
    DeploymentGraphSpec,
    Task,
    check_tasks,
)
from operators.graphs.objects import find_graph, graph_items, graph_name, owner_of, type_of
from operators.runtime import Call, Requester, bad_request, custom_path, field_path
from pipelines.model import NAME_PATTERN

MODEL_OF = {"release": "release", "plugin": "plugin", "environment": "cluster"}
"""Stead's owner kinds -> Fuel's relation models (an Environment is a Fuel cluster)."""
KIND_OF = {"release": "release", "plugin": "plugin", "cluster": "environment", "environment": "environment"}
MERGE_PATCH = "application/merge-patch+json"
TYPE_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,63}$")
TASK_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,119}$")
NODE_PATTERN = re.compile(NAME_PATTERN)
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




def count_param(call: Call, name: str, least: int, most: int | None) -> int | None:
    """A whole-number query parameter in [least, most] (None when absent; 400 naming it when not)."""
    raw = call.query.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < least or (most is not None and int(raw) > most):
        bounds = f"from {least}" + (f" to {most}" if most is not None else "")
        bad_request(f"query parameter {name}: expected a whole number {bounds}, got {raw!r}")
    return int(raw)


def subgraphs_of(raw: Any) -> Any:
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


