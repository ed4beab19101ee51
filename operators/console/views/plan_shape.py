"""A DeploymentGraph type's dry plan in the console (issue 29, "the plan of a graph type over chosen nodes
*before* a run"), with the dependencies on nodes outside the chosen subset.

The plan is the operator's own: the same inputs a GraphRun plans from (the merged graph of the type for the
environment, its nodes, each node's effective configuration for the conditions), handed to the same planner
process (`operators.graphs.planner.plan_in_process`: tenants' conditions never run in the console's event
loop, under the same CPU, memory and wall limits), which writes the same workflow a run would follow. Two
differences, said on the page: the inputs are read as the signed-in user (their RBAC decides; a user who may
not read the ConfigValues gets no plan rather than a plan whose conditions read nothing), and the data of the
environment's last successful run, which only the operator keeps, is not there: change functions
(`changed(...)`) count every value as changed, as in a forced run. Nothing is created: no GraphRun, no Event.

`plan_view` shapes the planner's document for the browser (pure): the workflow's steps in lanes (the anchors,
then each chosen node), in columns of their topological generations; the edges between steps (ordering
through an instance outside the subset is kept, as the run keeps it); and, for each dependency on an
instance of a node outside the subset (rule `satisfied-outside-subset`: counted as satisfied, not waited
for), a ghost box in that node's lane, marked outside, with its edge marked too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx

from operators.console.views.topology_app import layers_of
from operators.environment.models import EnvironmentSpec
from operators.graphs.kept import SourceGraph, plan_input, taken_by
from operators.graphs.models import DeploymentGraphSpec
from operators.graphs.plan import OUTSIDE_RULE

BOX_WIDTH = 180
BOX_HEIGHT = 40
COLUMN = 220
ROW = 56
MARGIN = 24
MAX_DRAWN = 400
"""Steps drawn at most: past them the page lists the plan's counts and outside edges without a drawing (an
SVG of thousands of boxes helps nobody)."""
ANCHORS = ""


def environments_taking(graph: Mapping[str, Any], environments: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The environments whose merge takes this DeploymentGraph (its release's, an enabled plugin's, its own),
    each with its nodes (name, roles): what the page offers to plan over."""
    spec = DeploymentGraphSpec.model_validate(graph.get("spec") or {})
    out = []
    for item in environments:
        name = str((item.get("metadata") or {}).get("name"))
        try:
            env = EnvironmentSpec.model_validate(item.get("spec") or {})
        except ValueError:
            continue
        if taken_by(spec, name, env):
            out.append({"name": name, "nodes": [{"name": n.name, "roles": list(n.roles)} for n in env.nodes]})
    return out


def node_data(env: EnvironmentSpec, values: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What each node's conditions read (`$`): its effective values by resource (`graphs.run.values_by_node`),
    plus `node` and `nodes`, as a GraphRun gives them."""
    everyone = [{"name": n.name, "roles": list(n.roles), "fqdn": n.fqdn} for n in env.nodes]
    return {n.name: {**values.get(n.name, {}), "node": {"name": n.name, "roles": list(n.roles), "fqdn": n.fqdn},
                     "nodes": everyone} for n in env.nodes}


def plan_payload(graph_type: str, environment: str, env: EnvironmentSpec, generation: int,
                 graphs: Sequence[SourceGraph], data: Mapping[str, Mapping[str, Any]],
                 nodes: Sequence[str] | None, tasks: Sequence[str] | None = None) -> dict[str, Any]:
    """The planner's input for a dry run of `graph_type` over `nodes` (None: all) of the environment, as a
    GraphRun's planning step makes it (`graphs.run.plan`), without the last run's data. Raises MergeError
    when the graphs of the type do not merge."""
    merged, _ = plan_input(None, environment, env, generation, graphs, graph_type)
    selection: dict[str, Any] = {"type": graph_type}
    if nodes is not None:
        selection["nodes"] = list(nodes)
    if tasks:
        selection["tasks"] = list(tasks)
    node_list = [{**n.model_dump(by_alias=True, exclude_none=True), "sshPort": "22", "sshUser": "root"}
                 for n in env.nodes]
    return {"spec": {"environment": environment, "graphs": [selection], "dryRun": True},
            "nodes": node_list, "nodeData": dict(data), "lastData": None,
            "merged": {graph_type: [t.model_dump(mode="json", by_alias=True, exclude_defaults=True) for t in merged]},
            "privateKeyRef": "ssh_private_key", "name": f"dry plan of {graph_type} on {environment}"}


def _split(key: str) -> tuple[str, str]:
    """`task@node` -> (task, node); an anchor's key is its task alone."""
    task, at, node = key.rpartition("@")
    return (task, node) if at else (key, ANCHORS)


def plan_view(document: Mapping[str, Any], chosen: Sequence[str]) -> dict[str, Any]:
    """The plan's document (`planner.make_plan_document`'s: `facts`, `index`, `planned`, `workflow`) shaped
    for drawing (see the module); `chosen` the nodes planned over, in the page's order."""
    facts = document.get("facts") or {}
    summary = dict(facts.get("plan") or {})
    outside = list(summary.pop("outsideEdges", None) or [])
    index: Mapping[str, Sequence[str]] = document.get("index") or {}
    planned: Mapping[str, Mapping[str, Any]] = document.get("planned") or {}
    steps = [s for s in (document.get("workflow") or {}).get("steps") or [] if not str(s["id"]).endswith("::done")]
    by_key = {f"{t}@{n}" if n else t: sid for sid, (t, n) in index.items()}
    boxes: dict[str, dict[str, Any]] = {}
    for step in steps:
        sid = str(step["id"])
        task, node = index.get(sid) or (step.get("name") or sid, ANCHORS)
        item = planned.get(sid) or {"state": "noop", "reason": "order only (a group's start)"}
        boxes[sid] = {"id": sid, "task": task, "node": node, "state": item.get("state"),
                      "reason": item.get("reason"), "outside": False}
    edges = [{"from": sid, "to": str(dep["step"]), "outside": False}
             for step in steps for dep in step.get("depends_on") or step.get("dependsOn") or []
             if str(step["id"]) in boxes and str(dep["step"]) in boxes for sid in [str(step["id"])]]
    for edge in outside:
        dependent = by_key.get(str(edge.get("dependent")))
        task, node = _split(str(edge.get("dependency")))
        ghost = f"outside:{edge.get('dependency')}"
        if dependent is None:
            continue
        boxes.setdefault(ghost, {"id": ghost, "task": task, "node": node, "state": "outside",
                                 "reason": "on a node outside the chosen ones: counted as done (as its last run "
                                 "left it), not waited for", "outside": True})
        edges.append({"from": dependent, "to": ghost, "outside": True, "rule": OUTSIDE_RULE})
    view: dict[str, Any] = {"summary": summary, "outsideEdges": outside, "nodes": list(chosen),
                            "steps": len(boxes), "drawn": len(boxes) <= MAX_DRAWN}
    if not view["drawn"]:
        return {**view, "boxes": [], "edges": [], "lanes": [], "width": 0, "height": 0}
    return {**view, **_layout(boxes, edges, chosen)}


def _layout(boxes: dict[str, dict[str, Any]], edges: list[dict[str, Any]], chosen: Sequence[str]
            ) -> dict[str, Any]:
    """Lanes (anchors, the chosen nodes, then nodes outside), columns by topological generation (what a step
    waits for is left of it), and each edge from its step's left side to the right side of what it waits for."""
    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(boxes)
    graph.add_edges_from((e["to"], e["from"]) for e in edges)
    column = {str(sid): k for k, layer in enumerate(layers_of(graph)) for sid in layer}
    order = [ANCHORS, *chosen]
    order += sorted({b["node"] for b in boxes.values()} - set(order))
    lanes = []
    top = MARGIN
    for node in order:
        members = sorted((b for b in boxes.values() if b["node"] == node), key=lambda b: (column[b["id"]], b["id"]))
        if not members:
            continue
        rows: dict[int, int] = {}
        for box in members:
            x = column[box["id"]]
            row = rows.get(x, 0)
            rows[x] = row + 1
            box.update(x=MARGIN + 120 + x * COLUMN, y=top + row * ROW)
        height = max(rows.values()) * ROW
        lanes.append({"node": node or "(anchors)", "outside": node not in (ANCHORS, *chosen), "y": top - 8,
                      "height": height})
        top += height
    columns = max(column.values(), default=0) + 1
    for edge in edges:
        a, b = boxes[edge["from"]], boxes[edge["to"]]
        edge["points"] = [[a["x"], a["y"] + BOX_HEIGHT / 2], [b["x"] + BOX_WIDTH, b["y"] + BOX_HEIGHT / 2]]
    return {"boxes": list(boxes.values()), "edges": edges, "lanes": lanes, "boxWidth": BOX_WIDTH,
            "boxHeight": BOX_HEIGHT, "width": MARGIN * 2 + 120 + (columns - 1) * COLUMN + BOX_WIDTH,
            "height": top + MARGIN}
