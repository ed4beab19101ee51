"""Dependencies become links: the entity graph, its cycles, and the orchestration edges of each action."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import networkx as nx

from operators.calm.compiler.state import CompileState
from operators.calm.compiler.structures import REVERSED, Dep, EdgeReason, Expansion, Link, lift
from operators.calm.models import (
    SYSTEM_ACTIONS,
    CompiledAction,
    CompiledEdge,
    CompiledTask,
    DependencyEntry,
)


class LinkBuilder(CompileState):
    def entity_graph(self, promoted: Sequence[tuple[Dep, str, str]]) -> nx.DiGraph:
        """X -> Y when X depends on Y: inherent, explicit and promoted implicit dependencies.
        Deployments are nodes that depend on their members, so that depending on a deployment
        means depending on all of it."""
        graph = nx.DiGraph()
        for name in self.entity_order():
            graph.add_node(name)
        for d in self.spec.deployments:
            graph.add_node(d.name)

        def add(x: str, y: str, reason: EdgeReason, source: str, why: str) -> None:
            if not graph.has_edge(x, y):
                graph.add_edge(x, y, reason=reason, source=source, why=why)

        for i, d in enumerate(self.spec.deployments):
            path = f"spec.deployments[{i}]"
            for p in d.packages:
                add(p, d.substrate, "inherent", path, f"package {p} is installed on substrate {d.substrate}")
            for s in d.services:
                for p in d.packages or [d.substrate]:
                    add(s, p, "inherent", path, f"service {s} runs on {p} of deployment {d.name}")
            for member in (d.substrate, *d.packages, *d.services):
                add(d.name, member, "inherent", path, f"deployment {d.name} includes {member}")
            for j, other in enumerate(d.depends_on):
                add(d.substrate, other, "explicit", f"{path}.dependsOn[{j}]", f"deployment {d.name} dependsOn {other}")
        for i, service in enumerate(self.spec.services):
            for j, other in enumerate(service.depends_on):
                add(service.name, other, "explicit", f"spec.services[{i}].dependsOn[{j}]",
                    f"{service.name} dependsOn {other}")
        for dep, setter_top, getter_top in promoted:
            add(getter_top, setter_top, "implicit", dep.field,
                f"{getter_top} reads {dep.macro} that {setter_top} sets in create")
        return graph

    def cycles(self, graph: nx.DiGraph, order: Mapping[str, int], what: str) -> list[str]:
        """One error per cycle (per strongly connected component), starting at its first node in
        spec order, with the reason of each edge: `S1 -> S2 -> S1 (S1 dependsOn S2; ...)`."""
        found: list[tuple[int, str]] = []
        for component in nx.strongly_connected_components(graph):
            if len(component) == 1:
                (only,) = component
                if not graph.has_edge(only, only):
                    continue
            edges = nx.find_cycle(graph.subgraph(component))
            nodes = [u for u, _ in edges]
            start = min(range(len(nodes)), key=lambda k: order.get(nodes[k], len(order)))
            nodes = nodes[start:] + nodes[:start]
            ring = [*nodes, nodes[0]]
            data = [graph.edges[a, b] for a, b in itertools.pairwise(ring)]
            text = f"{data[0]['source']}: {what}: {' -> '.join(ring)} ({'; '.join(d['why'] for d in data)})"
            found.append((order.get(nodes[0], len(order)), text))
        return [text for _, text in sorted(found)]

    def check_user_links(self, exp: Expansion) -> None:
        for link in exp.links:
            if link.reason != "user":
                continue
            for end, key in ((link.src, "from"), (link.dst, "to")):
                if end not in exp.by_id:
                    tops = ", ".join(inst.id for inst in exp.insts if inst.parent is None) or "none"
                    self.errors[f'{link.source}.{key}: "{end}" has no part in action {exp.label} '
                                f"(its tasks: {tops})"] = None

    def implicit_links(self, action: str, deps: Sequence[Dep]) -> tuple[list[tuple[Dep, str, str]], list[Link]]:
        """Lift each dependency to its orchestration edge: top-level ones (between the entities'
        call tasks) are returned apart, as (dep, setter's top task, getter's top task)."""
        tops: list[tuple[Dep, str, str]] = []
        links: dict[tuple[str, str], Link] = {}
        for dep in deps:
            lifted = lift(dep.getter.id, dep.setter.id)
            if lifted is None:
                continue
            parent, src, dst = lifted
            if parent is None:
                tops.append((dep, src, dst))
            elif (src, dst) not in links:
                links[(src, dst)] = Link(src, dst, "implicit", dep.field,
                                         f"{dep.getter.id} reads {dep.macro} that {dep.setter.id} sets in {action}")
        return tops, list(links.values())

    def structural_links(self, action: str, graph: nx.DiGraph) -> list[Link]:
        """The generated top-level edges of a system action: the entity graph restricted to the
        entities with a part in it (keeping paths through the others), oriented for the action."""
        kept = set(self.parts[action])
        links: list[Link] = []
        for x, reaches in _contract(graph, kept).items():
            for y, data in reaches.items():
                src, dst = (x, y) if action in REVERSED else (y, x)
                links.append(Link(src, dst, data["reason"], data["source"], data["why"]))
        return links

    def derived_links(self, action: str, create: Expansion) -> list[Link]:
        """Calm's rule: when create is edited, the other system actions are rebuilt from its edges
        (between entities; reversed for stop and delete) and marked user-edited."""
        graph = nx.DiGraph()
        for link in create.links:  # the user's own tasks stay in as steps between entities
            if link.reason == "user":
                graph.add_edge(link.src, link.dst, reason="user", source=link.source,
                               why=f"{link.src} before {link.dst} in the user-edited create")
        if not nx.is_directed_acyclic_graph(graph):
            return []  # the edited create's own cycle is reported on it
        kept = set(self.parts[action])
        links = []
        for x, reaches in _contract(graph, kept).items():
            for y, data in reaches.items():
                src, dst = (y, x) if action in REVERSED else (x, y)
                links.append(Link(src, dst, "user", data["source"], data["why"]))
        return links

    def warn_unordered(self, exp: Expansion, tops: Sequence[tuple[Dep, str, str]], what: str) -> None:
        """A user-edited action keeps the user's edges; say when they leave a reader unordered
        after the task that sets what it reads (Calm accepts such inconsistencies)."""
        if not tops:
            return
        top = {inst.id for inst in exp.insts if inst.parent is None}
        graph = nx.DiGraph((link.src, link.dst) for link in exp.links if link.dst in top)
        after: dict[str, set[str]] = {}  # one walk per setter, however many readers it has
        for dep, setter_top, getter_top in tops:
            if setter_top not in after:
                after[setter_top] = nx.descendants(graph, setter_top) if setter_top in graph else set()
            if setter_top in exp.by_id and getter_top in exp.by_id and getter_top not in after[setter_top]:
                self.warnings[f"{dep.field}: in the {what} action {exp.label}, {getter_top} reads {dep.macro} that "
                              f"{setter_top} sets, but no edge orders {setter_top} first"] = None

    def dependency_list(self, tops: Mapping[str, Sequence[tuple[Dep, str, str]]]) -> list[DependencyEntry]:
        spec = self.spec
        kind = self.index.kind_of
        out: list[DependencyEntry] = []
        for i, d in enumerate(spec.deployments):
            path = f"spec.deployments[{i}]"
            for p in d.packages:
                out.append(DependencyEntry(type="inherent", getter_resource_kind="Package", getter_resource_name=p,
                                           setter_resource_kind="Substrate", setter_resource_name=d.substrate,
                                           source=path))
            for s in d.services:
                for p in d.packages or [d.substrate]:
                    out.append(DependencyEntry(type="inherent", getter_resource_kind="Service", getter_resource_name=s,
                                               setter_resource_kind=kind(p) or "", setter_resource_name=p,
                                               source=path))
        for i, service in enumerate(spec.services):
            for j, other in enumerate(service.depends_on):
                out.append(DependencyEntry(type="explicit", getter_resource_kind="Service",
                                           getter_resource_name=service.name,
                                           setter_resource_kind=kind(other) or "", setter_resource_name=other,
                                           source=f"spec.services[{i}].dependsOn[{j}]"))
        for i, d in enumerate(spec.deployments):
            for j, other in enumerate(d.depends_on):
                out.append(DependencyEntry(type="explicit", getter_resource_kind="Deployment",
                                           getter_resource_name=d.name, setter_resource_kind=kind(other) or "",
                                           setter_resource_name=other, source=f"spec.deployments[{i}].dependsOn[{j}]"))
        seen: set[tuple[str, ...]] = set()
        for action in SYSTEM_ACTIONS:
            for dep, setter_top, getter_top in tops[action]:
                key = (action, getter_top, setter_top, dep.attribute, dep.getter.id, dep.setter.id)
                if key in seen:
                    continue
                seen.add(key)
                out.append(DependencyEntry(
                    type="implicit", getter_resource_kind=kind(getter_top) or "", getter_resource_name=getter_top,
                    setter_resource_kind=kind(setter_top) or "", setter_resource_name=setter_top,
                    setter_resource_attr=dep.attribute, action_resource_kind="Application", action_name=action,
                    getter_task=dep.getter.id, setter_task=dep.setter.id, source=dep.field,
                ))
        return out

    def action_cycles(self, exp: Expansion) -> None:
        """Cycles among the edges of an action (the runbooks' own, implicit ones, the generated or
        edited top level): an error per cycle, named in the runbook where it is."""
        graph = nx.DiGraph()
        for link in exp.links:
            if not graph.has_edge(link.src, link.dst):
                graph.add_edge(link.src, link.dst, source=link.source, why=link.why)
        if nx.is_directed_acyclic_graph(graph):
            return
        order = {inst.id: k for k, inst in enumerate(exp.insts)}
        for text in self.cycles(graph, order, f"cycle in action {exp.label}"):
            self.errors[text] = None

    def compiled(self, exp: Expansion, level: Literal["Application", "Service"], owner: str | None, *,
                 system: bool, user_edited: bool) -> CompiledAction:
        kind = self.index.kind_of
        tasks = [
            CompiledTask(
                id=i.id, name=i.task.name, parent=i.parent, type=i.task.type, target=i.target,
                target_kind=kind(i.target) if i.target is not None else None, calls=i.calls, source=i.task.source,
                retries=i.task.retries, timeout_seconds=i.task.timeout, runtime_macros=i.runtime_macros,
            )
            for i in exp.insts
        ]
        seen: set[tuple[str, str]] = set()
        edges = []
        for link in exp.links:
            if (link.src, link.dst) in seen:
                continue
            seen.add((link.src, link.dst))
            edges.append(CompiledEdge.model_validate({"from": link.src, "to": link.dst, "reason": link.reason}))
        self.action_cycles(exp)
        return CompiledAction(name=exp.label.rsplit("/", 1)[-1], level=level, owner=owner, system=system,
                              system_generated=system and not user_edited, user_edited=user_edited,
                              task_count=len(tasks), edge_count=len(edges), tasks=tasks, edges=edges)


def _contract(graph: nx.DiGraph, kept: set[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """For each kept node X, the kept nodes Y it reaches directly or through nodes that are not
    kept, with the data of X's first edge on the way.

    Only the nodes that a kept node reaches through non-kept ones are visited (each once, its
    set memoized): computing the sets of every node would build a transitive closure, quadratic
    on a long chain of entities that have no part in the action (services in a delete where only
    packages do something). The graph is acyclic here; the walk is iterative (no recursion limit).
    """
    through: dict[str, set[str]] = {}

    def reach(start: str) -> set[str]:
        if start in through:
            return through[start]
        pending: dict[str, set[str]] = {start: set()}
        stack = [(start, iter(graph.successors(start)))]
        while stack:
            node, successors = stack[-1]
            for succ in successors:
                if succ in kept:
                    pending[node].add(succ)
                elif succ in through:
                    pending[node] |= through[succ]
                elif succ not in pending:
                    pending[succ] = set()
                    stack.append((succ, iter(graph.successors(succ))))
                    break
            else:
                stack.pop()
                through[node] = pending.pop(node)
                if stack:
                    pending[stack[-1][0]] |= through[node]
        return through[start]

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for node in graph.nodes:
        if node not in kept:
            continue
        reaches: dict[str, dict[str, Any]] = {}
        for succ in graph.successors(node):
            data = graph.edges[node, succ]
            if succ in kept:
                reaches.setdefault(succ, data)
            else:
                for far in reach(succ):
                    reaches.setdefault(far, data)
        out[node] = reaches
    return out
