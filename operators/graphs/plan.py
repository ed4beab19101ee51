"""A run's plan: which task instance runs on which node, which does not, and why.

This module decides; `operators.graphs.workflow` turns its decision into the pipelines Workflow that
executes it (one step per instance, named by `step_id`, which lives here because the plan's fault
tolerance groups list their steps). Kept apart so that the planning rules (selection, subsets and
conditions and their budget; which instances a subgraph covers is `operators.graphs.subgraphs`) read
in one place, and the executor's contract in another.

Inputs: the merged graph of each type in run order (with its node and task selection), the
environment's nodes, the run's subgraphs, dryRun / noop / force, each node's data for the
conditions and the data of the environment's last successful run. Each graph is expanded over
ALL the environment's nodes (so that cross dependencies see the whole environment), then every
instance gets a state:

- `skipped` with a reason: `node not selected` (outside the run's node subset), `not selected`
  (the `tasks` filter; a selected group selects its tasks), `outside subgraph`, `condition false`;
- `noop` with a reason: structure (stage, group, skipped tasks), or a noop run (only puppet runs,
  with `noop: true`; shell, upload_file, copy_files, sync and reboot do not run at all: a noop
  run must not change a node);
- `planned`: it runs.

**Nodes outside the subset** (the rule): an instance on a node that is not selected does not
run, and a dependency on it counts as *satisfied* — that node is taken as its last run left
it. Every such edge is listed in `Plan.outside_edges` (rule `satisfied-outside-subset`) and
counted in the summary; none is dropped silently. Ordering *through* such an instance is kept:
if A waits for X (outside) and X waits for B, A waits for B in the workflow.

Skipped instances of selected nodes stay in the workflow as `noop` steps, so that edges through
them hold (a false condition never reorders the rest).
"""

from __future__ import annotations

import hashlib
import heapq
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from operators.graphs.conditions import ConditionError
from operators.graphs.evaluations import SharedEvaluations
from operators.graphs.expansion import ANCHOR, MAX_INSTANCES, Expansion, GraphNode, expand, fault_tolerance
from operators.graphs.models import (
    STRUCTURE_TYPES,
    GraphRunSpec,
    GraphSelection,
    Subgraph,
    Task,
    subgraph_problems,
)
from operators.graphs.subgraphs import subgraph_members

InstanceState = Literal["planned", "skipped", "noop"]
OUTSIDE_RULE = "satisfied-outside-subset"
STEP_TYPES: dict[str, str] = {
    "puppet": "ssh.puppet",
    "shell": "ssh.shell",
    "upload_file": "ssh.upload_file",
    "copy_files": "ssh.copy_files",
    "sync": "ssh.sync",
    "reboot": "ssh.reboot",
}
"""Fuel task type -> the executor's step type (the SSH executor's contract)."""
NOOP_STEP = "noop"
MAX_STEP_ID = 253
MAX_CONDITION_EVALUATIONS = 100_000
CONDITIONS_SECONDS = 15.0
"""Time all the conditions of a run may take together (each one is bounded to a second as well)."""


class PlanError(ValueError):
    """A run that cannot be planned (unknown node or task, a condition that fails), naming what."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems[:50]) + (f" (and {len(problems) - 50} more)" if len(problems) > 50 else ""))
        self.problems = problems


@dataclass(frozen=True)
class PlannedInstance:
    """One task instance in the plan."""

    graph_type: str
    task: str
    node: str  # ANCHOR ("") for anchors
    state: InstanceState
    reason: str | None
    step_type: str

    @property
    def key(self) -> str:
        return f"{self.task}@{self.node}" if self.node else self.task


@dataclass(frozen=True)
class OutsideEdge:
    """A dependency on an instance of a node outside the run's subset: satisfied, not waited for."""

    graph_type: str
    dependent: str  # task@node
    dependency: str  # task@node (outside the subset)
    rule: str = OUTSIDE_RULE


@dataclass
class GraphPlan:
    """The plan of one graph type."""

    graph_type: str
    prefix: str
    expansion: Expansion
    selected_nodes: frozenset[str]
    states: list[tuple[InstanceState, str | None]]
    step_types: list[str]
    outside_edges: list[OutsideEdge] = field(default_factory=list)

    def included(self, i: int) -> bool:
        """Whether instance i is part of the run (anchors, and instances of selected nodes)."""
        node = self.expansion.instances[i][1]
        return node == ANCHOR or node in self.selected_nodes

    def shown(self, i: int) -> bool:
        """Whether instance i is one of the plan's task instances: not a group's start anchor (the
        group's own instance stands for it: the start is order only, a step of the workflow)."""
        return not self.expansion.is_group_start(i)

    def instances(self) -> Iterator[tuple[int, PlannedInstance]]:
        """(index, instance) of every instance but the groups' start anchors."""
        for i, (task, node) in enumerate(self.expansion.instances):
            if self.shown(i):
                state, reason = self.states[i]
                yield i, PlannedInstance(self.graph_type, task, node, state, reason, self.step_types[i])

    def order(self) -> list[int]:
        """The instances in an order they can run in: each after every instance it waits for, and otherwise in
        the graph's order (Kahn's, the smallest index first). What a node's tasks are listed in."""
        deps = self.expansion.deps
        waiting = [len(d) for d in deps]
        dependents: list[list[int]] = [[] for _ in deps]
        for i, ds in enumerate(deps):
            for d in ds:
                dependents[d].append(i)
        ready = [i for i, n in enumerate(waiting) if n == 0]
        heapq.heapify(ready)
        out: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            out.append(i)
            for j in dependents[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, j)
        return out if len(out) == len(deps) else list(range(len(deps)))  # a cycle: refused before, never here


@dataclass
class Plan:
    """A run's plan: per graph type, per node and task, the state and why; the edges; counts."""

    graphs: list[GraphPlan]
    dry_run: bool = False
    noop: bool = False
    force: bool = False

    def instances(self, *, include_outside: bool = True) -> Iterator[PlannedInstance]:
        for graph in self.graphs:
            for i, inst in graph.instances():
                if include_outside or graph.included(i):
                    yield inst

    def in_order(self) -> Iterator[PlannedInstance]:
        """Every instance (groups' start anchors aside, as `instances`), graph type after graph type, each
        type's in an order they can run in (`GraphPlan.order`)."""
        for graph in self.graphs:
            listed = dict(graph.instances())
            for i in graph.order():
                if i in listed:
                    yield listed[i]

    @property
    def outside_edges(self) -> list[OutsideEdge]:
        return [e for g in self.graphs for e in g.outside_edges]

    def by_node(self) -> dict[str, list[PlannedInstance]]:
        """Instances of the run (selected nodes and anchors), per node ("" for anchors), in plan order."""
        out: dict[str, list[PlannedInstance]] = {}
        for inst in self.instances(include_outside=False):
            out.setdefault(inst.node, []).append(inst)
        return out

    def summary(self) -> dict[str, int]:
        """The counts of `models.PlanSummary` (camelCase keys, ready for status)."""
        counts = {"instances": 0, "planned": 0, "skipped": 0, "noop": 0, "edges": 0,
                  "outsideSubset": len(self.outside_edges)}
        for graph in self.graphs:
            for i, (state, _) in enumerate(graph.states):
                if not graph.included(i):
                    continue
                counts["edges"] += sum(1 for d in graph.expansion.deps[i] if graph.included(d))
                if graph.shown(i):
                    counts["instances"] += 1
                    counts[state] += 1
        return counts

    def unplaced(self) -> dict[str, list[str]]:
        """Per graph type, the work tasks that no node of the environment has (they run nowhere)."""
        return {g.graph_type: list(g.expansion.unplaced) for g in self.graphs if g.expansion.unplaced}

    def fault_tolerance(self) -> dict[str, dict[str, FaultToleranceGroup]]:
        """Per graph type, each group's selected nodes, how many of them may fail (its faultTolerance
        over the nodes of the run), and the steps of its tasks there (the workflow cannot say this
        itself: the runner counts failed nodes)."""
        out: dict[str, dict[str, FaultToleranceGroup]] = {}
        for g in self.graphs:
            exp = g.expansion
            for group, (nodes, _) in exp.groups.items():
                chosen = [n for n in nodes if n in g.selected_nodes]
                # relative to the nodes of the run: '-1' keeps meaning "one of them must succeed"
                may_fail = fault_tolerance(exp.tasks[group].fault_tolerance, len(chosen))
                steps = [step_id(g.prefix, sub, node) for sub in exp.tasks[group].tasks for node in chosen
                         if (sub, node) in exp.index]
                out.setdefault(g.graph_type, {})[group] = FaultToleranceGroup(chosen, may_fail, steps)
        return out


@dataclass(frozen=True)
class FaultToleranceGroup:
    """A group of a plan: its nodes in the run, how many of them may fail before the run fails,
    and the workflow steps of its tasks on those nodes."""

    nodes: list[str]
    may_fail: int
    steps: list[str]


def plan_run(
    spec: GraphRunSpec,
    merged: Mapping[str, Sequence[Task]],
    nodes: Sequence[GraphNode | Mapping[str, Any]],
    *,
    node_data: Mapping[str, Mapping[str, Any]] | None = None,
    last_data: Mapping[str, Mapping[str, Any]] | None = None,
) -> Plan:
    """The plan of a GraphRun: `merged` holds the merged tasks of each type the run names."""
    missing = [g.type for g in spec.graphs if g.type not in merged]
    if missing:
        raise PlanError([f"graphs[{i}].type: no graph of type {g.type!r} for this environment"
                         for i, g in enumerate(spec.graphs) if g.type in missing])
    return make_plan(
        [(g, merged[g.type]) for g in spec.graphs], nodes, subgraphs=spec.subgraphs, dry_run=spec.dry_run,
        noop=spec.noop, force=spec.force, node_data=node_data, last_data=last_data,
    )


def make_plan(
    graphs: Sequence[tuple[GraphSelection, Sequence[Task]]],
    nodes: Sequence[GraphNode | Mapping[str, Any]],
    *,
    subgraphs: Sequence[Subgraph] = (),
    dry_run: bool = False,
    noop: bool = False,
    force: bool = False,
    node_data: Mapping[str, Mapping[str, Any]] | None = None,
    last_data: Mapping[str, Mapping[str, Any]] | None = None,
) -> Plan:
    """Plan graphs (each a selection and its merged tasks, in run order) over the environment's
    nodes. `node_data[node]` is what the node's conditions read (`$`); `last_data[node]` the
    node's data of the last successful run (missing node or None: everything changed).
    Raises `GraphError` (unknown references, cycles) or `PlanError` (unknown nodes or tasks in
    the selection, subgraph references that match nothing, conditions that fail)."""
    node_list = [GraphNode.of(n) for n in nodes]
    names = [n.name for n in node_list]
    known = set(names)
    problems: list[str] = subgraph_problems(list(subgraphs))
    for k, sub in enumerate(subgraphs):
        for side, chosen in (("startNodes", sub.start_nodes), ("endNodes", sub.end_nodes)):
            problems.extend(f"subgraphs[{k}].{side}: {n!r} is not a node of the environment"
                            for n in chosen or () if n not in known)
    if problems:
        raise PlanError(problems)
    plans: list[GraphPlan] = []
    prefixes: set[str] = set()
    sub_hits: list[bool] = [False] * (2 * len(subgraphs))
    budget = ConditionBudget()
    shared = SharedEvaluations(force=force)
    instances = 0
    for index, (selection, tasks) in enumerate(graphs):
        exp = expand(tasks, node_list, max_instances=MAX_INSTANCES - instances)
        instances += len(exp.instances)
        if selection.nodes is not None:
            unknown = [n for n in selection.nodes if n not in known]
            problems.extend(f"graphs[{index}].nodes: {n!r} is not a node of the environment" for n in unknown)
            selected = frozenset(selection.nodes)
        else:
            selected = frozenset(names)
        chosen_tasks: set[str] | None = None
        if selection.tasks is not None:
            unknown_tasks = [t for t in selection.tasks if t not in exp.tasks]
            problems.extend(f"graphs[{index}].tasks: {t!r} is not a task of the merged {selection.type!r} graph"
                            for t in unknown_tasks)
            chosen_tasks = set(selection.tasks)
            for t in selection.tasks:
                if t in exp.tasks and exp.tasks[t].type == "group":
                    chosen_tasks.update(exp.tasks[t].tasks)
        in_subgraph = subgraph_members(exp, subgraphs, sub_hits) if subgraphs else None
        prefix = _prefix(selection.type, prefixes)
        states, step_types = _states(
            exp, selected, chosen_tasks, in_subgraph, noop=noop, shared=shared,
            node_data=node_data or {}, last_data=last_data, problems=problems, budget=budget,
        )
        plan = GraphPlan(selection.type, prefix, exp, selected, states, step_types)
        for i, deps in enumerate(exp.deps):
            if not plan.included(i):
                continue
            for d in deps:
                if not plan.included(d):
                    plan.outside_edges.append(OutsideEdge(selection.type, exp.key(i), exp.key(d)))
        plans.append(plan)
    for k, sub in enumerate(subgraphs):
        for at, refs, on in ((0, sub.start, sub.start_nodes), (1, sub.end, sub.end_nodes)):
            if refs and not sub_hits[2 * k + at]:
                where = f" on {', '.join(on)}" if on is not None else ""
                problems.append(f"subgraphs[{k}].{'start' if at == 0 else 'end'}: {refs!r} match no task of the "
                                f"graphs run{where}")
    if problems:
        raise PlanError(problems)
    return Plan(plans, dry_run=dry_run, noop=noop, force=force)


def _prefix(graph_type: str, taken: set[str]) -> str:
    """A step id prefix for a graph type: the type itself (made to start with a letter or digit),
    suffixed .2, .3 when the run names the type again."""
    base = graph_type if graph_type[0].isalnum() else f"g{graph_type}"
    prefix, n = base, 1
    while prefix in taken:
        n += 1
        prefix = f"{base}.{n}"
    taken.add(prefix)
    return prefix


def _states(
    exp: Expansion,
    selected: frozenset[str],
    chosen_tasks: set[str] | None,
    in_subgraph: set[int] | None,
    *,
    noop: bool,
    shared: SharedEvaluations,
    node_data: Mapping[str, Mapping[str, Any]],
    last_data: Mapping[str, Mapping[str, Any]] | None,
    problems: list[str],
    budget: ConditionBudget,
) -> tuple[list[tuple[InstanceState, str | None]], list[str]]:
    states: list[tuple[InstanceState, str | None]] = []
    step_types: list[str] = []
    memo: dict[tuple[str, str], bool] = {}
    for i, (task_id, node) in enumerate(exp.instances):
        task = exp.task(task_id)
        state: InstanceState
        reason: str | None
        if node != ANCHOR and node not in selected:
            state, reason = "skipped", "node not selected"
        elif task.type in STRUCTURE_TYPES:
            state, reason = "noop", f"{task.type} (structure, nothing runs)"
        elif chosen_tasks is not None and task_id not in chosen_tasks:
            state, reason = "skipped", "not selected (tasks filter)"
        elif in_subgraph is not None and i not in in_subgraph:
            state, reason = "skipped", "outside subgraph"
        elif task.condition is not None and not _condition(task, node, memo, node_data, last_data, shared, problems,
                                                           budget):
            state, reason = "skipped", "condition false"
        elif noop and task.type != "puppet":
            state, reason = "noop", f"noop run: {task.type} tasks do not run"
        else:
            state, reason = "planned", None
        states.append((state, reason))
        step_types.append(STEP_TYPES[task.type] if state == "planned" else NOOP_STEP)
    return states, step_types


def _condition(
    task: Task, node: str, memo: dict[tuple[str, str], bool], node_data: Mapping[str, Mapping[str, Any]],
    last_data: Mapping[str, Mapping[str, Any]] | None, shared: SharedEvaluations, problems: list[str],
    budget: ConditionBudget,
) -> bool:
    """A task's condition on a node; the same expression on the same node is looked at once (task files
    repeat conditions through YAML anchors), and evaluated once for the nodes whose data agree on what it
    reads (`SharedEvaluations`; each node still counts against the budget, as if evaluated)."""
    condition = task.condition
    assert condition is not None
    text = condition.yaql_exp if condition.yaql_exp is not None else f"legacy:{condition.legacy}"
    key = (text, node)
    found = memo.get(key)
    if found is not None:
        return found
    data = node_data.get(node, {})
    last = None if last_data is None else last_data.get(node)
    exhausted = budget.spend()
    if exhausted:
        if not budget.reported:
            problems.append(f"task {task.id!r} on {node or 'the anchors'}: condition: {exhausted}")
            budget.reported = True
        value = False
    else:
        try:
            value = shared.evaluate(condition, node, data, last)
        except ConditionError as error:
            problems.append(f"task {task.id!r} on {node or 'the anchors'}: condition: {error}")
            value = False
    memo[key] = value
    return value


@dataclass
class ConditionBudget:
    """What a plan's conditions may cost together: `MAX_CONDITION_EVALUATIONS` evaluations (distinct
    conditions x nodes; a condition repeated through YAML anchors counts once per node) and
    `CONDITIONS_SECONDS` of time, each evaluation being bounded by itself as well
    (`conditions.TIME_BUDGET_SECONDS`). Past either, the plan fails saying which."""

    evaluations: int = 0
    deadline: float = field(default_factory=lambda: time.monotonic() + CONDITIONS_SECONDS)
    reported: bool = False

    def spend(self) -> str | None:
        """Count one evaluation; why no more may be made, or None."""
        self.evaluations += 1
        if self.evaluations > MAX_CONDITION_EVALUATIONS:
            return (f"the run evaluates more than {MAX_CONDITION_EVALUATIONS} conditions (distinct conditions x "
                    "nodes): fewer distinct conditions, or fewer nodes at once (graphs[].nodes)")
        if time.monotonic() > self.deadline:
            return (f"the run's conditions take longer than {CONDITIONS_SECONDS:g}s together: simpler conditions, "
                    "or fewer nodes at once (graphs[].nodes)")
        return None


# --- step ids ----------------------------------------------------------------------------------

def step_id(prefix: str, task: str, node: str) -> str:
    """`<graph type>:<task>:<node>` (`<type>:<task>` for an anchor); ids longer than the workflow
    allows are cut and suffixed with a hash of the whole, so they stay unique."""
    raw = f"{prefix}:{task}:{node}" if node else f"{prefix}:{task}"
    if len(raw) <= MAX_STEP_ID:
        return raw
    digest = hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()
    return f"{raw[:MAX_STEP_ID - 17]}~{digest}".replace("~", "-")



__all__ = [
    "NOOP_STEP", "OUTSIDE_RULE", "STEP_TYPES", "FaultToleranceGroup", "GraphPlan", "OutsideEdge", "Plan",
    "PlanError", "PlannedInstance", "make_plan", "plan_run", "step_id",
]
