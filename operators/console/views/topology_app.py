"""An App's topology (issue 29, "Topology and graphs"): its deployments, substrates, packages and services,
and the dependencies between them, laid out in layers for the browser to draw.

What is drawn is what the App runs: the blueprint frozen in its `status.snapshot`, whose dependency list is
the compiler's (`compile_blueprint` is pure, and the run compiles the same snapshot: `calm.actionrun`). An App
not launched yet has no snapshot: its Blueprint's spec and `status.dependencyList` stand in for it, and the
answer says which (`source`).

Edges are the dependency list's, `from` the dependent entity `to` the one it depends on (as `stead
blueprint deps` prints `A -> B`), each with its `type`: `inherent` (a deployment's substrate, packages,
services), `explicit` (`dependsOn`) or `implicit` (a task reads a macro another entity's task sets: `macro`
true, and `why` names the tasks and the attribute). A deployment is a lane: its own box (with the replicas
the App has of it), then what it places.

Layout (in Python: the console's JS only draws, issue 29's decision): a lane per deployment; columns are
the topological generations of "depends on" (what depends on nothing on the left); parallel edges between
the same two entities (an explicit and an implicit one, often) bend apart so that both are seen.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import networkx as nx
from pydantic import ValidationError

from operators.calm.compiler import compile_blueprint
from operators.calm.models import ENTITY_KINDS, BlueprintSpec, CompiledState

NODE_WIDTH = 156
NODE_HEIGHT = 46
COLUMN = 204
ROW = 72
MARGIN = 24
BEND = 26
"""Pixels: a node's box, the distance between columns and rows, the margin, how far parallel edges bend."""
KIND_ORDER = {kind: rank for rank, kind in enumerate((*ENTITY_KINDS, "Application"))}


def layers_of(graph: nx.DiGraph, key: Any = None) -> list[list[Hashable]]:
    """The nodes of `graph` in columns: its topological generations (an edge u -> v puts v right of u), each
    sorted by `key`. A graph with a cycle (which a compiled blueprint never has: a fallback, not an error)
    is layered by breadth-first distance from the nodes with fewest predecessors instead."""
    try:
        columns = [list(column) for column in nx.topological_generations(graph)]
    except nx.NetworkXUnfeasible:
        depth: dict[Hashable, int] = {}
        for start in sorted(graph.nodes, key=lambda n: (graph.in_degree(n), key(n) if key else str(n))):
            if start in depth:
                continue
            for node, distance in nx.single_source_shortest_path_length(graph, start).items():
                depth.setdefault(node, distance)
        columns = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for node, distance in depth.items():
            columns[distance].append(node)
    return [sorted(column, key=key) if key else sorted(column, key=str) for column in columns]


def entity_id(kind: str | None, name: str | None) -> str:
    return f"{kind or '?'}/{name or '?'}"


def _why(entry: Mapping[str, Any]) -> str:
    """What an entry means, for a human (the same words as `stead blueprint deps`)."""
    if entry.get("type") == "implicit":
        action = entry.get("actionName") or "?"
        reader = entry.get("getterTask") or entry.get("getterResourceName")
        setter = entry.get("setterTask") or entry.get("setterResourceName")
        return f"{action}: {reader} reads {entry.get('setterResourceAttr')}, which {setter} sets"
    if entry.get("type") == "explicit":
        return f"dependsOn ({entry.get('source') or 'spec'})"
    return f"placed by a deployment ({entry.get('source') or 'spec'})"


def dependency_entries(spec: Mapping[str, Any], compiled_state: Mapping[str, Any] | None = None
                       ) -> tuple[list[dict[str, Any]], list[str]]:
    """The dependency list of a blueprint spec as the compiler makes it (camelCase, as a status holds it), and
    its errors (then no list)."""
    try:
        parsed = BlueprintSpec.model_validate(dict(spec))
        previous = CompiledState.model_validate(compiled_state) if compiled_state else None
    except ValidationError as error:
        return [], [f"the blueprint's spec is not valid: {error.errors()[0]['msg']}"]
    result = compile_blueprint(parsed, previous)
    if not result.ok:
        return [], list(result.errors)
    return [e.model_dump(by_alias=True, mode="json", exclude_none=True) for e in result.dependency_list], []


def app_topology(app: Mapping[str, Any], blueprint: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The topology of an App (see the module): from its snapshot, else from `blueprint` (its Blueprint as
    read, None when it could not be read)."""
    status = app.get("status") or {}
    snapshot = status.get("snapshot")
    replicas: dict[str, int] = {}
    for deployment in (status.get("entities") or {}).get("deployments") or []:
        replicas[str(deployment.get("name"))] = len(deployment.get("replicas") or [])
    if isinstance(snapshot, Mapping) and isinstance(snapshot.get("spec"), Mapping):
        spec: Mapping[str, Any] = snapshot["spec"]
        entries, errors = dependency_entries(spec, snapshot.get("compiledState"))
        source, name = "snapshot", str(snapshot.get("name") or "")
    elif blueprint is not None:
        spec = blueprint.get("spec") or {}
        bp_status = blueprint.get("status") or {}
        entries, errors = list(bp_status.get("dependencyList") or []), list(bp_status.get("errors") or [])
        source, name = "blueprint", str((blueprint.get("metadata") or {}).get("name") or "")
    else:
        return {"source": None, "blueprint": (app.get("spec") or {}).get("blueprint"), "nodes": [], "edges": [],
                "errors": ["the App has no snapshot yet and its Blueprint could not be read"], "width": 0, "height": 0}
    return {"source": source, "blueprint": name, "errors": errors, **topology(spec, entries, replicas)}


def topology(spec: Mapping[str, Any], entries: Sequence[Mapping[str, Any]], replicas: Mapping[str, int]
             ) -> dict[str, Any]:
    """Nodes (every entity of the spec, and any an entry names), edges, lanes and their coordinates.

    A deployment is a lane: its box first, then what it places (its substrate, packages, services) in
    the columns of their generation; entities no deployment places share a last lane."""
    nodes: dict[str, dict[str, Any]] = {}

    def node(kind: str, name: str) -> str:
        ident = entity_id(kind, name)
        nodes.setdefault(ident, {"id": ident, "kind": kind, "name": name, "deployment": None})
        return ident

    lanes: dict[str | None, list[str]] = {}
    for deployment in spec.get("deployments") or []:
        name = str(deployment.get("name"))
        ident = node("Deployment", name)
        nodes[ident].update(deployment=name, replicas=replicas.get(name))
        lanes[name] = []
        members = [("Substrate", deployment.get("substrate")),
                   *(("Package", p) for p in deployment.get("packages") or []),
                   *(("Service", s) for s in deployment.get("services") or [])]
        for kind, member in members:
            if member:
                target = node(kind, str(member))
                if nodes[target]["deployment"] is None:
                    nodes[target]["deployment"] = name
    for field, kind in (("substrates", "Substrate"), ("packages", "Package"), ("services", "Service")):
        for item in spec.get(field) or []:
            node(kind, str(item.get("name")))
    edges: list[dict[str, Any]] = []
    for entry in entries:
        getter = node(str(entry.get("getterResourceKind")), str(entry.get("getterResourceName")))
        setter = node(str(entry.get("setterResourceKind")), str(entry.get("setterResourceName")))
        kind = str(entry.get("type") or "explicit")
        edges.append({"from": getter, "to": setter, "type": kind, "macro": kind == "implicit", "why": _why(entry)})

    # columns: the deployments' boxes first, then the entities' generations of "depends on"
    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(n for n, data in nodes.items() if data["kind"] != "Deployment")
    graph.add_edges_from((e["to"], e["from"]) for e in edges if e["to"] in graph and e["from"] in graph)
    column_of = {str(n): k + 1 for k, column in enumerate(layers_of(graph)) for n in column}
    for ident, data in nodes.items():
        data["layer"] = column_of.get(ident, 0)
        if data["kind"] != "Deployment":
            lanes.setdefault(data["deployment"], []).append(ident)
    top = MARGIN
    bands = []
    for lane, idents in lanes.items():
        rows: dict[int, int] = {}
        if lane is not None:
            box = nodes[entity_id("Deployment", lane)]
            box.update(x=MARGIN, y=top)
            rows[0] = 1
        for entity in sorted(idents, key=lambda n: (nodes[n]["layer"], KIND_ORDER.get(nodes[n]["kind"], 99),
                                                    nodes[n]["name"])):
            data = nodes[entity]
            row = rows.get(data["layer"], 0)
            rows[data["layer"]] = row + 1
            data.update(x=MARGIN + data["layer"] * COLUMN, y=top + row * ROW)
        height = max(rows.values(), default=1) * ROW
        bands.append({"deployment": lane, "y": top - (ROW - NODE_HEIGHT) / 2, "height": height})
        top += height
    _route(edges, nodes)
    columns = max((data["layer"] for data in nodes.values()), default=0) + 1
    width = MARGIN * 2 + (columns - 1) * COLUMN + NODE_WIDTH
    for band in bands:
        band.update(x=MARGIN / 2, width=width - MARGIN)
    return {"nodes": list(nodes.values()), "edges": edges, "lanes": bands, "nodeWidth": NODE_WIDTH,
            "nodeHeight": NODE_HEIGHT, "width": width if nodes else 0,
            "height": top - ROW + NODE_HEIGHT + MARGIN if nodes else 0}


def _route(edges: list[dict[str, Any]], nodes: Mapping[str, Mapping[str, Any]]) -> None:
    """Each edge's path: from the side of its `from` box facing `to` to the facing side of `to`, as a
    quadratic curve (`points`: start, control, end); edges between the same two boxes bend apart."""
    seen: dict[frozenset[str], int] = {}
    for edge in edges:
        a, b = nodes[edge["from"]], nodes[edge["to"]]
        pair = frozenset((edge["from"], edge["to"]))
        k = seen[pair] = seen.get(pair, -1) + 1
        bend = 0 if k == 0 else BEND * ((k + 1) // 2) * (1 if k % 2 else -1)
        ay, by = a["y"] + NODE_HEIGHT / 2, b["y"] + NODE_HEIGHT / 2
        if a["x"] == b["x"]:  # same column: from the bottom of the upper one to the top of the lower one
            upper, lower = (a, b) if a["y"] < b["y"] else (b, a)
            start = (upper["x"] + NODE_WIDTH / 2, upper["y"] + NODE_HEIGHT)
            end = (lower["x"] + NODE_WIDTH / 2, lower["y"])
            if upper is b:
                start, end = end, start
            bend = bend or BEND
        else:
            start = (a["x"], ay) if a["x"] > b["x"] else (a["x"] + NODE_WIDTH, ay)
            end = (b["x"] + NODE_WIDTH, by) if a["x"] > b["x"] else (b["x"], by)
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        dx, dy = end[0] - start[0], end[1] - start[1]
        length = max((dx * dx + dy * dy) ** 0.5, 1.0)
        control = (mx - dy / length * bend, my + dx / length * bend)
        edge["points"] = [[round(start[0], 1), round(start[1], 1)], [round(control[0], 1), round(control[1], 1)],
                          [round(end[0], 1), round(end[1], 1)]]
