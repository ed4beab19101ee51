"""A Lifecycle drawn as a state diagram, laid out here so that the browser only draws it (issue 29).

The layout is computed in Python, pure and unit-tested, and sent as coordinates and SVG path data: the
page's script turns each node into a rectangle and each edge into a path, nothing more.

- Layers are the breadth-first distances from the initial state (networkx `bfs_layers`), over every
  destination a transfer has (its target, and its error state when it can fail): a state is drawn as
  far down as the fewest transfers that reach it. States no transfer reaches go in one last layer.
- Within a layer the states keep the lifecycle's order, then move towards the mean position of the
  states that lead to them (one barycentre pass), which removes most crossings of real lifecycles.
- One edge per (source, destination) pair: a transfer's success path and its error path are two
  edges; two transfers between the same pair share one edge, their labels joined by " | ".
  Edges going down one layer are straight; the others (back, sideways, skipping layers) bend to the
  left of their direction, so that a pair of opposite edges never lie on each other. A state's
  transfers to itself are a loop on its right.
- The path the instance took (its status log, `LogEntry`, the latest `LOG_LIMIT` transfers) marks the
  nodes it reached and the edges it took with the versions at which it did; the current state is lit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from operators.lsm.lifecycle import triggers
from operators.lsm.models import LifecycleSpec, LogEntry, State, Transfer, TriggerName

LAYER_GAP = 120.0
"""Vertical distance between the centres of two layers (room for an edge's label between them)."""
NODE_GAP = 72.0
"""Horizontal room between two states of a layer."""
NODE_HEIGHT = 36.0
CHAR_WIDTH = 7.5
"""The width of one character of a state's name at the diagram's font size (13px monospace), rounded up."""
MIN_WIDTH = 84.0
LABEL_CHAR_WIDTH = 6.2
"""The width of one character of an edge's label (11px sans-serif), rounded up."""
MARGIN = 40.0
"""Room around the drawing: self-loops and bent edges reach out of the nodes' box."""
LOOP_REACH = 34.0

TRIGGER_WORDS: Mapping[TriggerName, str] = {
    "create": "create", "auto": "auto", "api_set_state": "set-state", "on_update": "update",
    "on_delete": "delete", "resource_based": "App", "expert": "expert",
}
"""How an edge's label names a trigger: the console's actions use the same words (update, set-state, delete)."""


@dataclass(frozen=True)
class Node:
    """A state where it is drawn: `x`, `y` its centre, `width`, `height` its box."""

    name: str
    layer: int
    x: float
    y: float
    width: float
    height: float
    label: str | None
    """The state's label (success, info, warning, danger): its colour."""
    description: str | None
    initial: bool
    deleted: bool
    lit: bool
    """The instance is in this state now."""
    versions: tuple[int, ...]
    """The versions at which the instance arrived here (from the log kept in status), oldest first."""


@dataclass(frozen=True)
class Part:
    """One path of one transfer that an edge draws."""

    transfer: int
    """Its index in spec.transfers."""
    triggers: tuple[TriggerName, ...]
    error: bool
    """The error path (a failed validation or deployment)."""
    validate: bool
    operation: str | None
    description: str | None
    text: str
    """How the edge's label says it: triggers, outcome and operation (`auto, valid [promote]`)."""


@dataclass(frozen=True)
class Edge:
    """An arrow from `source` to `target`: `path` is SVG path data; the label goes at (`label_x`, `label_y`)."""

    id: str
    source: str
    target: str
    parts: tuple[Part, ...]
    label: str
    error: bool
    """Every part is an error path (drawn dashed)."""
    path: str
    label_x: float
    label_y: float
    versions: tuple[int, ...]
    """The versions at which the instance took this edge (from the log kept in status)."""


@dataclass(frozen=True)
class Step:
    """One transfer of the path taken, as the log kept in status records it."""

    source: str | None
    target: str
    trigger: TriggerName
    version: int
    time: str
    error: bool
    operation: str | None
    message: str | None
    edge: str | None
    """The edge that draws it; None for the creation, or a transfer the lifecycle no longer has."""


@dataclass(frozen=True)
class Diagram:
    box: tuple[float, float, float, float]
    """The SVG viewBox (x, y, width, height) that holds the nodes, the edges and their labels."""
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    path: tuple[Step, ...]
    path_complete: bool
    """The log kept in status starts at the creation (it keeps the latest transfers only)."""
    current: str | None
    notes: tuple[str, ...] = field(default=())
    """What the diagram could not show (a current state the lifecycle no longer has)."""


# --- the pieces ----------------------------------------------------------------------------------


def part_text(transfer: Transfer, error: bool) -> str:
    """An edge label's words for one path of a transfer: `auto, valid`, `App failed`, `set-state [rollback]`."""
    words: list[str] = []
    for trigger in triggers(transfer):
        if trigger == "resource_based":
            words.append("App failed" if error else "App ok")
        else:
            words.append(TRIGGER_WORDS[trigger])
    text = ", ".join(words)
    if transfer.validate_:
        text += ", invalid" if error else ", valid"
    operation = transfer.error_operation if error else transfer.target_operation
    if operation is not None:
        text += f" [{operation}]"
    return text


def edge_id(source: str, target: str) -> str:
    return f"{source}->{target}"


def _pairs(spec: LifecycleSpec, names: Iterable[str]) -> dict[tuple[str, str], list[Part]]:
    """The edges to draw, each with its parts, in the order of the transfers (an unknown state is skipped:
    a lifecycle the API server kept though its checks failed still draws what it can)."""
    known = set(names)
    pairs: dict[tuple[str, str], list[Part]] = {}
    for index, transfer in enumerate(spec.transfers):
        paths = [(transfer.target, False)] + ([(transfer.error, True)] if transfer.error is not None else [])
        for destination, error in paths:
            if destination is None or transfer.source not in known or destination not in known:
                continue
            operation = transfer.error_operation if error else transfer.target_operation
            pairs.setdefault((transfer.source, destination), []).append(Part(
                transfer=index, triggers=triggers(transfer), error=error, validate=transfer.validate_,
                operation=operation, description=transfer.description, text=part_text(transfer, error)))
    return pairs


def layers(spec: LifecycleSpec) -> list[list[str]]:
    """The states by layer: breadth-first from the initial state; the unreachable ones last, in their order."""
    names = _names(spec)
    graph = nx.DiGraph()
    graph.add_nodes_from(names)
    graph.add_edges_from(pair for pair in _pairs(spec, names) if pair[0] != pair[1])
    order = {name: index for index, name in enumerate(names)}
    out: list[list[str]] = []
    if spec.initial_state in order:
        out = [sorted(layer, key=order.__getitem__) for layer in nx.bfs_layers(graph, [spec.initial_state])]
    reached = {name for layer in out for name in layer}
    rest = [name for name in names if name not in reached]
    if rest:
        out.append(rest)
    return _untangle(out, graph)


def _names(spec: LifecycleSpec) -> list[str]:
    seen: dict[str, None] = {}
    for state in spec.states:
        seen.setdefault(state.name, None)
    return list(seen)


def _untangle(found: list[list[str]], graph: nx.DiGraph) -> list[list[str]]:
    """Each layer ordered by the mean position of its states' predecessors in the layers above (one pass,
    top down); a state with none above keeps its place (a stable sort on the layer's own order)."""
    place: dict[str, float] = {}
    out: list[list[str]] = []
    for depth, layer in enumerate(found):
        def key(item: tuple[int, str], depth: int = depth) -> float:
            index, name = item
            above = [place[p] for p in graph.predecessors(name) if p in place and _depth(out, p) < depth]
            return sum(above) / len(above) if above else float(index)

        ordered = [name for _, name in sorted(enumerate(layer), key=key)]
        for index, name in enumerate(ordered):
            place[name] = float(index) - (len(ordered) - 1) / 2 + (len(found[0]) - 1) / 2
        out.append(ordered)
    return out


def _depth(done: Sequence[Sequence[str]], name: str) -> int:
    return next((depth for depth, layer in enumerate(done) if name in layer), len(done))


def node_width(name: str) -> float:
    return max(MIN_WIDTH, math.ceil(len(name) * CHAR_WIDTH + 24))


# --- geometry ------------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _border(node: Node, towards_x: float, towards_y: float) -> tuple[float, float]:
    """Where the line from the node's centre towards a point leaves its box."""
    dx, dy = towards_x - node.x, towards_y - node.y
    if dx == 0 and dy == 0:
        return node.x, node.y
    half_w, half_h = node.width / 2, node.height / 2
    scale = min(half_w / abs(dx) if dx else math.inf, half_h / abs(dy) if dy else math.inf)
    return node.x + dx * scale, node.y + dy * scale


def _geometry(source: Node, target: Node, reverse_exists: bool) -> tuple[str, float, float]:
    """SVG path data and the label's place for an edge between two different nodes."""
    if source.name == target.name:
        right, top, bottom = source.x + source.width / 2, source.y - 8, source.y + 8
        reach = right + LOOP_REACH
        path = (f"M {_fmt(right)} {_fmt(top)} C {_fmt(reach)} {_fmt(top - 26)} {_fmt(reach)} {_fmt(bottom + 26)} "
                f"{_fmt(right)} {_fmt(bottom)}")
        return path, reach + 4, source.y
    dx, dy = target.x - source.x, target.y - source.y
    length = math.hypot(dx, dy)
    straight = target.layer == source.layer + 1 and not reverse_exists
    bend = 0.0 if straight else 24.0 + 0.18 * length
    # the left of the direction of travel (screen coordinates: y grows downwards)
    normal_x, normal_y = dy / length, -dx / length
    mid_x, mid_y = (source.x + target.x) / 2, (source.y + target.y) / 2
    control_x, control_y = mid_x + normal_x * bend * 2, mid_y + normal_y * bend * 2
    start = _border(source, control_x, control_y)
    end = _border(target, control_x, control_y)
    path = (f"M {_fmt(start[0])} {_fmt(start[1])} Q {_fmt(control_x)} {_fmt(control_y)} "
            f"{_fmt(end[0])} {_fmt(end[1])}")
    # the curve's middle (t = 1/2 of a quadratic Bezier)
    label_x = 0.25 * start[0] + 0.5 * control_x + 0.25 * end[0]
    label_y = 0.25 * start[1] + 0.5 * control_y + 0.25 * end[1]
    return path, label_x, label_y


def _label(parts: Sequence[Part]) -> str:
    return " | ".join(dict.fromkeys(part.text for part in parts))


def _box(nodes: Iterable[Node], edges: Iterable[Edge]) -> tuple[float, float, float, float]:
    """The viewBox: the nodes' boxes and the edges' labels (a bent edge reaches no further than its label,
    the middle of its curve), with a margin."""
    xs: list[float] = [0.0]
    ys: list[float] = [0.0]
    for node in nodes:
        xs += [node.x - node.width / 2, node.x + node.width / 2]
        ys += [node.y - node.height / 2, node.y + node.height / 2]
    for edge in edges:
        half = len(edge.label) * LABEL_CHAR_WIDTH / 2
        if edge.source == edge.target:
            xs += [edge.label_x, edge.label_x + 2 * half]  # a loop's label starts right of the loop
        else:
            xs += [edge.label_x - half, edge.label_x + half]
        ys += [edge.label_y - 8, edge.label_y + 8]
    left, top = min(xs) - MARGIN / 2, min(ys) - MARGIN / 2
    return (round(left, 1), round(top, 1), round(max(xs) + MARGIN / 2 - left, 1), round(max(ys) + MARGIN / 2 - top, 1))


# --- the diagram ---------------------------------------------------------------------------------


def diagram(spec: LifecycleSpec, current: str | None = None, log: Sequence[LogEntry] = ()) -> Diagram:
    """The lifecycle laid out, with `current` lit and the path of `log` (a ServiceInstance's status.log)."""
    found = layers(spec)
    states: dict[str, State] = {}
    for state in spec.states:
        states.setdefault(state.name, state)
    arrived: dict[str, list[int]] = {}
    taken: dict[tuple[str, str], list[int]] = {}
    for entry in log:
        arrived.setdefault(entry.to, []).append(entry.version)
        if entry.from_ is not None:
            taken.setdefault((entry.from_, entry.to), []).append(entry.version)

    pairs = _pairs(spec, states)
    # a state with a loop to itself takes the loop's and its label's room on its right
    room = {name: LOOP_REACH + 6 + len(_label(parts)) * LABEL_CHAR_WIDTH
            for (name, target), parts in pairs.items() if name == target}
    widths = [sum(node_width(n) + room.get(n, 0.0) for n in layer) + NODE_GAP * (len(layer) - 1) for layer in found]
    inner = max(widths, default=0.0)
    nodes: dict[str, Node] = {}
    for depth, layer in enumerate(found):
        x = MARGIN + (inner - widths[depth]) / 2
        for name in layer:
            width = node_width(name)
            state = states[name]
            nodes[name] = Node(
                name=name, layer=depth, x=x + width / 2, y=MARGIN + NODE_HEIGHT / 2 + depth * LAYER_GAP,
                width=width, height=NODE_HEIGHT, label=state.label, description=state.description,
                initial=name == spec.initial_state, deleted=state.deleted, lit=name == current,
                versions=tuple(arrived.get(name, ())))
            x += width + room.get(name, 0.0) + NODE_GAP

    edges: list[Edge] = []
    for (source, target), parts in pairs.items():
        path, label_x, label_y = _geometry(nodes[source], nodes[target], (target, source) in pairs)
        edges.append(Edge(
            id=edge_id(source, target), source=source, target=target, parts=tuple(parts), label=_label(parts),
            error=all(part.error for part in parts), path=path, label_x=round(label_x, 1),
            label_y=round(label_y, 1), versions=tuple(taken.get((source, target), ()))))

    steps = tuple(Step(
        source=entry.from_, target=entry.to, trigger=entry.trigger, version=entry.version, time=entry.time,
        error=entry.error, operation=entry.operation, message=entry.message,
        edge=edge_id(entry.from_, entry.to) if entry.from_ is not None and (entry.from_, entry.to) in pairs else None,
    ) for entry in log)
    notes: list[str] = []
    if current is not None and current not in nodes:
        notes.append(f'the instance is in state "{current}", which the lifecycle no longer has')
    return Diagram(
        box=_box(nodes.values(), edges), nodes=tuple(nodes.values()),
        edges=tuple(edges), path=steps, path_complete=bool(log) and log[0].from_ is None, current=current,
        notes=tuple(notes))
