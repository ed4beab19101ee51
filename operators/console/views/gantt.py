"""A run drawn: its per-group timeline (Gantt) and a GraphRun's DAG, laid out here (pure Python, networkx)
so that the browser only scales coordinates and draws SVG (docs/console.md, "Runs").

- `timeline`: one row per node (or replica), a bar per task instance that started, from its start to its
  end (to `now` while it runs). Instances of one node that overlap in time (a parallel strategy) get lanes
  of their own in the row, so no bar hides another. x is in seconds from the run's start.
- `task_edges` + `dag_layout`: the run's tasks as a DAG. The edges come from the merged graph the run
  executed (`requires`, `required_for` and the cross dependencies; a `/regex/` reference is searched in
  the task ids by RE2, as the planner does, since a tenant wrote it), kept between the tasks the run has;
  a task the run does not have is contracted (its predecessors lead to its successors), so an order that
  went through it stays drawn.
  Layers are topological generations; within a layer, tasks are ordered by the mean position of their
  predecessors (one barycentre pass), which uncrosses the common fan-in/fan-out shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import networkx as nx

from operators.runtime import RegexError, compile_pattern, parse_instant

MAX_DAG_TASKS = 1500
"""Tasks the DAG is drawn for at most (fuel-library's default graph has about 400): past it the page says
so rather than making the browser draw an unreadable picture."""


def _seconds(value: Any, origin: datetime) -> float | None:
    at = parse_instant(value)
    return None if at is None else round((at - origin).total_seconds(), 3)


def timeline(groups: Sequence[Mapping[str, Any]], run_started: Any, now: datetime) -> dict[str, Any]:
    """`{span, lanes, rows: [{label, lane, lanes, bars: [{id, task, state, x0, x1, lane}]}]}`: rows in the
    groups' order, lane numbers counted over the whole chart (a row starts at its `lane`), bars in seconds
    from the origin (the run's start, or its first instance's when the run has none)."""
    starts = [t for g in groups for i in g.get("tasks") or [] if (t := parse_instant(i.get("started"))) is not None]
    origin = parse_instant(run_started) or (min(starts) if starts else None)
    if origin is None:
        return {"span": 0.0, "lanes": 0, "rows": []}
    rows: list[dict[str, Any]] = []
    lane_base, span = 0, 0.0
    for group in groups:
        bars = []
        for item in group.get("tasks") or []:
            x0 = _seconds(item.get("started"), origin)
            if x0 is None:
                continue
            x1 = _seconds(item.get("finished"), origin) if item.get("finished") else None
            if x1 is None:
                x1 = round((now - origin).total_seconds(), 3) if item.get("state") in ("running", "pending") else x0
            x0, x1 = max(0.0, x0), max(0.0, x0, x1)
            bars.append({"id": item.get("id"), "task": item.get("task"), "state": item.get("state"),
                         "x0": x0, "x1": x1})
            span = max(span, x1)
        if not bars:
            continue
        lanes = _lanes(bars)
        for bar in bars:
            bar["lane"] += lane_base
        rows.append({"label": group.get("label"), "name": group.get("name"), "lane": lane_base, "lanes": lanes,
                     "bars": bars})
        lane_base += lanes
    return {"span": span, "lanes": lane_base, "rows": rows}


def _lanes(bars: list[dict[str, Any]]) -> int:
    """Give each bar the first lane (from 0) where it overlaps no bar already placed; how many lanes."""
    ends: list[float] = []
    for bar in sorted(bars, key=lambda b: (b["x0"], b["x1"])):
        lane = next((i for i, end in enumerate(ends) if end <= bar["x0"]), len(ends))
        if lane == len(ends):
            ends.append(bar["x1"])
        else:
            ends[lane] = bar["x1"]
        bar["lane"] = lane
    return max(1, len(ends))


def _names(value: Any) -> list[str]:
    """Task references of a Fuel-form field: a list of ids or /regex/, or of `{name: ...}` (cross deps)."""
    if isinstance(value, str):
        return [value]
    found = []
    for item in value or []:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            found.append(item["name"])
    return found


def _matcher(ids: Sequence[str]) -> Callable[[str], list[str]]:
    """Task reference -> the ids it names (an id, or a `/regex/` searched in them), each resolved once."""
    known = set(ids)
    cache: dict[str, list[str]] = {}

    def match(ref: str) -> list[str]:
        if ref not in cache:
            if len(ref) >= 2 and ref.startswith("/") and ref.endswith("/"):
                try:
                    pattern = compile_pattern(ref[1:-1])
                except RegexError:
                    cache[ref] = []
                else:
                    cache[ref] = [i for i in ids if pattern.search(i)]
            else:
                cache[ref] = [ref] if ref in known else []
        return cache[ref]

    return match


def task_edges(tasks: Sequence[Mapping[str, Any]], present: Iterable[str]) -> list[tuple[str, str]]:
    """(before, after) edges between the `present` tasks of a merged graph given in Fuel's form (the
    graphs API's deployment_tasks), tasks absent from the run contracted, sorted."""
    ids = [str(t.get("id")) for t in tasks if isinstance(t.get("id"), str)]
    match = _matcher(ids)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(ids)
    for task in tasks:
        tid = str(task.get("id"))
        before = [*_names(task.get("requires")), *_names(task.get("cross-depends") or task.get("cross_depends"))]
        after = [*_names(task.get("required_for")),
                 *_names(task.get("cross-depended-by") or task.get("cross_depended_by"))]
        graph.add_edges_from((dep, tid) for ref in before for dep in match(ref) if dep != tid)
        graph.add_edges_from((tid, dep) for ref in after for dep in match(ref) if dep != tid)
    keep = set(present)
    for node in [n for n in graph.nodes if n not in keep]:
        graph.add_edges_from((p, s) for p in graph.predecessors(node) for s in graph.successors(node) if p != s)
        graph.remove_node(node)
    graph.add_nodes_from(keep)
    return sorted(graph.edges)


def dag_layout(nodes: Sequence[str], edges: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """`{layers, width, nodes: [{id, layer, slot}], edges: [[from, to]]}`: `layer` is the column (a task
    comes after everything it waits for), `slot` its row in the column; `width` the most slots a column has.
    A cycle (which admission refuses, but a status is not admission) is drawn with its tasks in one layer."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((a, b) for a, b in edges if a in graph and b in graph and a != b)
    condensed = nx.condensation(graph)
    layer_of: dict[str, int] = {}
    for depth, generation in enumerate(nx.topological_generations(condensed)):
        for component in generation:
            for member in condensed.nodes[component]["members"]:
                layer_of[member] = depth
    layers: dict[int, list[str]] = {}
    for node in nodes:  # the given order first: a stable picture for the same run
        layers.setdefault(layer_of[node], []).append(node)
    slot: dict[str, int] = {}
    for depth in sorted(layers):
        column = layers[depth]
        given = {n: i for i, n in enumerate(column)}
        centres = {}
        for node in column:
            placed = [slot[p] for p in graph.predecessors(node) if p in slot]
            centres[node] = (sum(placed) / len(placed) if placed else float(given[node]), given[node])
        column.sort(key=centres.__getitem__)
        for i, node in enumerate(column):
            slot[node] = i
    return {"layers": len(layers), "width": max((len(c) for c in layers.values()), default=0),
            "nodes": [{"id": n, "layer": layer_of[n], "slot": slot[n]} for n in nodes],
            "edges": [[a, b] for a, b in sorted(graph.edges)]}
