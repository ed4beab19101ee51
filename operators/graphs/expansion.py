"""Expansion of a merged graph over an environment's nodes: task instances and their edges.

An *instance* is one task on one node, or an *anchor* (node ``""``): stage tasks, groups, and
`skipped` tasks with no nodes. The rules (Fuel's, with the differences said):

- **Nodes of a task**: by `tags` (a node's tags default to its roles), else `roles`, else
  `groups`. A role is `*` (every node), `master` (the nodes with role `master`: Stead has no Fuel
  master, an environment may name its deployment host so), `/regex/` (searched in each role or
  tag name, as Fuel's name matching does: anchor it with ^...$ for a whole name), or an exact
  name. A `groups` entry names a group task (the task runs on that group's nodes) or, when no
  group has that id, a role (as Fuel's task-based serializer reads it). A group (`type: group`,
  with `roles` and `tasks`) also runs each of its `tasks` on the group's nodes, in addition to
  the task's own nodes.
- **Groups order their tasks** (Fuel's granular deployment ran a group's nodes in waves, after
  the groups it requires). A group's *members* are the instances, on the group's nodes, of the
  tasks it lists in `tasks` and of the tasks naming it in `groups`. A group is two anchors: its
  start, `<group>::start`, and its end, the group's own id. The start waits for what the group
  requires (`requires`, `crossDepends`, and whatever names the group in `requiredFor` /
  `crossDependedBy`); every member waits for the start; the end waits for every member, and what
  requires the group (or that the group is required for) waits for the end. So a group requiring
  another starts none of its tasks on any node before every task of the other has ended on every
  node, with edges linear in the members, never members x members: the start is made to precede
  only the members with no predecessor among the group's members, and the end to follow only
  those with no successor among them (the others are ordered through them).
  An instance that is a member of two groups one of which precedes the other (through anchors:
  `compute` requiring `controller`, a node with both roles) is a member of the earlier one only:
  it runs once on that node, in the earlier group's wave (being in both would be a cycle).
- **Anchors**: `stage` tasks (pre_deployment_start -> ... -> post_deployment_end, ordered by
  their own requires as the release graph writes them), groups (their start and end), and
  `skipped` tasks without nodes. They run nowhere; edges through them hold.
- **requires / requiredFor** bind to the named task's instance on the same node, or to an anchor.
  An anchor's requires bind to anchors only (it has no node).
- **crossDepends / crossDependedBy** bind to the named task (an id or `/regex/`) on the nodes of
  `role` (default `*`; matched against roles and tags), `self` = the same node; never to the
  instance itself. Anchors always bind. Policy `all`: every matching instance. Policy `any`:
  Fuel (nailgun's role resolver) picks ONE node of the role at random and binds to the task's
  instances there; Stead picks the first node by name that has an instance of the task, so a
  plan is reproducible and the dependency never vanishes because the random node lacked it.
- **strategy**: `one_by_one` runs the task's instances one node after another (in node order);
  `parallel` with `amount: N` runs at most N at once: the instances in node order form N chains (the
  k-th waits for the (k-N)-th), so a node's instance starts when the one N places before it ended.
  Stricter than a pool of N (a slow node holds back its own chain), but it is order in the graph itself:
  a resumed or subset run keeps it, and a cycle it would make is reported like any other.
- **Stricter than Fuel**: a reference that matches no task of the merged graph, and a cycle, are
  errors (`GraphError`) naming the tasks. A task that exists but has no instance on the node in
  question is not an error (a controller task required by a compute task binds to nothing on a
  compute node, as in Fuel).

Conditions are not evaluated here: the plan (`operators.graphs.plan`) marks instances skipped
and keeps them, so the edges computed here hold whatever the data says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.graphs.models import CrossDependency, Task, compile_ref, is_regex
from operators.graphs.regexes import RegexError
from operators.graphs.structure import TaskMatcher
from pipelines.model import find_cycle

ANCHOR = ""
"""The node of an anchor instance."""
GROUP_START = "::start"
"""The suffix of a group's start anchor (`<group>::start`): `:` is in no task id, so it names no task."""
MAX_MESSAGES = 50
MAX_INSTANCES = 250_000
"""Task instances (tasks x their nodes) a run may plan, all its graph types together: ten times the
size planning is measured at (200 tasks over 100 nodes, `bench/graph_plan.py`), 1.2 s there."""
MAX_BINDINGS = 2_500_000
"""Dependencies a graph may bind (each `requires` target on each instance, each cross dependency's
instances times the dependent's): what makes an expansion superlinear, bounded before it is built."""


class GraphError(ValueError):
    """A merged graph that cannot be expanded: every problem, each naming the tasks."""

    def __init__(self, problems: list[str]) -> None:
        shown = problems[:MAX_MESSAGES]
        more = f" (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        super().__init__("; ".join(shown) + more)
        self.problems = problems


@dataclass(frozen=True)
class GraphNode:
    """A node as the expansion sees it: plain data (the Environment's node, with optional tags)."""

    name: str
    roles: tuple[str, ...] = ()
    tags: tuple[str, ...] | None = None
    address: str | None = None
    fqdn: str | None = None
    ssh_port: str = "22"
    ssh_user: str = "root"

    @property
    def effective_tags(self) -> tuple[str, ...]:
        return self.roles if self.tags is None else self.tags

    @classmethod
    def of(cls, node: GraphNode | Mapping[str, Any]) -> GraphNode:
        """From an Environment's node as a dict (`name`, `roles`, `address`, `fqdn`, `tags`, or
        `labels["stead.dev/tags"]` as a comma-separated list)."""
        if isinstance(node, GraphNode):
            return node
        tags = node.get("tags")
        labels = node.get("labels") or {}
        if tags is None and "stead.dev/tags" in labels:
            tags = [t.strip() for t in str(labels["stead.dev/tags"]).split(",") if t.strip()]
        return cls(
            name=str(node["name"]),
            roles=tuple(node.get("roles") or ()),
            tags=None if tags is None else tuple(tags),
            address=node.get("address"),
            fqdn=node.get("fqdn"),
            ssh_port=str(node.get("sshPort", node.get("ssh_port", "22"))),
            ssh_user=str(node.get("sshUser", node.get("ssh_user", "root"))),
        )


@dataclass
class Expansion:
    """The instances of a merged graph and, per instance, the instances it waits for.

    `instances[i]` is (task id, node name or ANCHOR); `deps[i]` the indexes it waits for;
    `unplaced` the work tasks with no node at all (shown by the plan, not an error: a role no
    node has yet); `groups` each group's nodes and how many of them may fail; `starts` each
    group's start anchor (its end is the group's own instance), `members` the instances each group
    orders between them.
    """

    tasks: dict[str, Task]
    nodes: list[GraphNode]
    instances: list[tuple[str, str]] = field(default_factory=list)
    index: dict[tuple[str, str], int] = field(default_factory=dict)
    deps: list[set[int]] = field(default_factory=list)
    by_task: dict[str, list[int]] = field(default_factory=dict)
    unplaced: list[str] = field(default_factory=list)
    groups: dict[str, tuple[list[str], int]] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    entry: dict[int, int] = field(default_factory=dict)
    """A group's end -> its start: where what the group waits for is bound."""
    members: dict[str, list[int]] = field(default_factory=dict)
    max_instances: int = MAX_INSTANCES
    bindings: int = 0

    def add(self, task: str, node: str) -> int:
        key = (task, node)
        found = self.index.get(key)
        if found is not None:
            return found
        i = len(self.instances)
        if i >= self.max_instances:
            raise GraphError([f"the run has more than {MAX_INSTANCES} task instances (tasks x their nodes, all its "
                              "graph types together): run fewer types, tasks (graphs[].tasks) or nodes "
                              "(graphs[].nodes) at once"])
        self.instances.append(key)
        self.index[key] = i
        self.deps.append(set())
        self.by_task.setdefault(task, []).append(i)
        return i

    def bind(self, count: int, task: str, field: str) -> None:
        """Count `count` dependencies about to be bound for `task`'s `field`; past `MAX_BINDINGS`, stop."""
        self.bindings += count
        if self.bindings > MAX_BINDINGS:
            raise GraphError([f"task {task!r}: {field}: the graph binds more than {MAX_BINDINGS} dependencies "
                              "(instances x the instances they wait for): narrow the references (ids rather than "
                              "/regex/, roles rather than '*')"])

    def task(self, task_id: str) -> Task:
        """The task of an instance's task id (a group's start anchor: the group)."""
        found = self.tasks.get(task_id)
        if found is None and task_id.endswith(GROUP_START):
            found = self.tasks.get(task_id[:-len(GROUP_START)])
        if found is None:
            raise KeyError(task_id)
        return found

    def is_group_start(self, i: int) -> bool:
        """Whether instance i is a group's start anchor (made by the expansion, not a task of the graph)."""
        return self.instances[i][0] not in self.tasks

    def wait(self, waiter: int, waited: int) -> None:
        """`waiter` waits for `waited`. A group waits through its start anchor, so that what the
        group waits for comes before every task of it (its end only waits for its start and members)."""
        self.deps[self.entry.get(waiter, waiter)].add(waited)

    def is_anchor(self, task_id: str) -> bool:
        return task_id in self.by_task and self.instances[self.by_task[task_id][0]][1] == ANCHOR

    @property
    def edge_count(self) -> int:
        return sum(len(d) for d in self.deps)

    def key(self, i: int) -> str:
        task, node = self.instances[i]
        return f"{task}@{node}" if node else task


class _Resolver:
    """Role and tag references to node names, each distinct reference list resolved once."""

    def __init__(self, nodes: Sequence[GraphNode]) -> None:
        self.names = [n.name for n in nodes]
        self.by_label: dict[str, list[str]] = {}
        self.by_tag: dict[str, list[str]] = {}
        for node in nodes:
            for label in dict.fromkeys((*node.roles, *node.effective_tags)):
                self.by_label.setdefault(label, []).append(node.name)
            for tag in node.effective_tags:
                self.by_tag.setdefault(tag, []).append(node.name)
        self._cache: dict[tuple[bool, tuple[str, ...]], list[str]] = {}

    def resolve(self, refs: Sequence[str], *, tags: bool = False) -> list[str]:
        key = (tags, tuple(refs))
        found = self._cache.get(key)
        if found is not None:
            return found
        table = self.by_tag if tags else self.by_label
        chosen: set[str] = set()
        for ref in refs:
            if ref == "*":
                chosen.update(self.names)
            elif ref == "master":
                chosen.update(self.by_label.get("master", ()))
            elif is_regex(ref):
                try:
                    pattern = compile_ref(ref)
                except RegexError as error:  # admission refuses it; a graph stored before RE2 did not
                    raise GraphError([f"role or tag {ref!r}: invalid regex: {error}"]) from None
                for label, names in table.items():
                    if pattern.search(label):
                        chosen.update(names)
            else:
                chosen.update(table.get(ref, ()))
        order = [n for n in self.names if n in chosen]
        self._cache[key] = order
        return order


def fault_tolerance(value: str | None, total: int) -> int:
    """How many of a group's `total` nodes may fail: a count, a percentage of them (rounded
    down) or a negative count (all but that many may fail, never below 0); unset: none (Fuel
    lets an unset group fail entirely; Stead's default is the safe one)."""
    if value is None:
        return 0
    text = value.strip()
    amount = (int(text[:-1]) * total) // 100 if text.endswith("%") else int(text)
    if amount < 0:
        amount = max(0, total + amount)
    return min(amount, total)


def expand(tasks: Iterable[Task], nodes: Iterable[GraphNode | Mapping[str, Any]], *,
           max_instances: int = MAX_INSTANCES) -> Expansion:
    """The instances and edges of a merged graph over the nodes; `GraphError` lists every unknown
    reference, then (when there are none) a cycle; past `max_instances` instances or `MAX_BINDINGS`
    dependencies it stops, saying so."""
    node_list = [GraphNode.of(n) for n in nodes]
    task_map: dict[str, Task] = {}
    for task in tasks:
        task_map[task.id] = task  # merged: ids are unique
    exp = Expansion(task_map, node_list, max_instances=max_instances)
    resolver = _Resolver(node_list)
    matcher = TaskMatcher(list(task_map))
    problems: list[str] = []

    group_nodes: dict[str, list[str]] = {}
    for task in task_map.values():
        if task.type == "group":
            group_nodes[task.id] = resolver.resolve(task.roles or task.tags or task.groups)
            exp.groups[task.id] = (group_nodes[task.id], fault_tolerance(task.fault_tolerance,
                                                                         len(group_nodes[task.id])))
    member_of: dict[str, list[str]] = {}
    for group_id, task in ((g, task_map[g]) for g in group_nodes):
        for sub in task.tasks:
            if sub not in task_map:
                problems.append(f"group {group_id!r}: tasks names {sub!r}, which is not in the merged graph")
            else:
                member_of.setdefault(sub, []).append(group_id)

    # 1. instances
    for task in task_map.values():
        if task.type == "group":
            start = exp.add(task.id + GROUP_START, ANCHOR)
            exp.starts[task.id] = start
            end = exp.add(task.id, ANCHOR)
            exp.entry[end] = start
            exp.deps[end].add(start)
            continue
        if task.type == "stage":
            exp.add(task.id, ANCHOR)
            continue
        names = _task_nodes(task, resolver, group_nodes, member_of)
        if not names:
            if task.type == "skipped" and not (task.tags or task.roles or task.groups):
                exp.add(task.id, ANCHOR)
            else:
                exp.unplaced.append(task.id)
            continue
        for name in names:
            exp.add(task.id, name)

    # 2. edges
    node_pos = {n.name: i for i, n in enumerate(node_list)}
    for task in task_map.values():
        mine = exp.by_task.get(task.id, [])
        for ref in task.requires:
            targets = _targets(matcher, ref, task.id, "requires", problems)
            exp.bind(len(mine) * len(targets), task.id, "requires")
            for i in mine:
                _bind_same(exp, i, targets, forward=False)
        for ref in task.required_for:
            targets = _targets(matcher, ref, task.id, "requiredFor", problems)
            exp.bind(len(mine) * len(targets), task.id, "requiredFor")
            for i in mine:
                _bind_same(exp, i, targets, forward=True)
        for dep in task.cross_depends:
            targets = _targets(matcher, dep.name, task.id, "crossDepends", problems)
            _bind_cross(exp, resolver, node_pos, mine, targets, dep, forward=False, where=(task.id, "crossDepends"))
        for dep in task.cross_depended_by:
            targets = _targets(matcher, dep.name, task.id, "crossDependedBy", problems)
            _bind_cross(exp, resolver, node_pos, mine, targets, dep, forward=True, where=(task.id, "crossDependedBy"))
        width = _width(task)
        if width is not None and len(mine) > width:
            ordered = sorted(mine, key=lambda j: node_pos.get(exp.instances[j][1], -1))
            for k in range(width, len(ordered)):
                exp.deps[ordered[k]].add(ordered[k - width])
    if problems:
        raise GraphError(problems)

    # 3. groups: their members between their start and end
    if group_nodes:
        for group_id in group_nodes:
            exp.members[group_id] = []
        preceding: dict[str, set[str]] = {}
        for task_id in task_map:
            groups = [g for g in task_map[task_id].groups if g in group_nodes]
            groups += member_of.get(task_id, ())
            if groups:
                _add_members(exp, task_id, list(dict.fromkeys(groups)), group_nodes, preceding)
        for group_id, members in exp.members.items():
            _order_members(exp, group_id, members)

    cycle = find_cycle(dict(enumerate(exp.deps)))
    if cycle:
        raise GraphError(["dependency cycle (each waits for the next): " + " -> ".join(map(exp.key, cycle))])
    return exp


def _width(task: Task) -> int | None:
    """How many of the task's instances may run at once (None: all): 1 for one_by_one, `amount` for parallel."""
    if task.strategy is None:
        return None
    return 1 if task.strategy.type == "one_by_one" else task.strategy.amount


def _task_nodes(
    task: Task, resolver: _Resolver, group_nodes: Mapping[str, list[str]], member_of: Mapping[str, list[str]],
) -> list[str]:
    if task.tags:
        own = resolver.resolve(task.tags, tags=True)
    elif task.roles:
        own = resolver.resolve(task.roles)
    elif task.groups:
        chosen: set[str] = set()
        roles = [g for g in task.groups if g not in group_nodes]
        for g in task.groups:
            if g in group_nodes:
                chosen.update(group_nodes[g])
        chosen.update(resolver.resolve(roles) if roles else ())
        own = [n for n in resolver.names if n in chosen]
    else:
        own = []
    groups = member_of.get(task.id)
    if not groups:
        return own
    chosen = set(own)
    for g in groups:
        chosen.update(group_nodes[g])
    return [n for n in resolver.names if n in chosen]


def _targets(matcher: TaskMatcher, ref: str, task_id: str, field: str, problems: list[str]) -> list[str]:
    found = matcher.match(ref)
    if not found:
        what = "no task of the merged graph matches" if is_regex(ref) else "which is not in the merged graph"
        problems.append(f"task {task_id!r}: {field} {ref!r}, {what}")
    return found


def _bind_same(exp: Expansion, i: int, targets: Sequence[str], *, forward: bool) -> None:
    """requires (forward=False: i waits for them) / requiredFor (they wait for i), same node or anchor."""
    task, node = exp.instances[i]
    for target in targets:
        if target == task:
            continue
        j = exp.index.get((target, node))
        if j is None and node != ANCHOR:
            j = exp.index.get((target, ANCHOR))
        if j is None:
            continue
        if forward:  # exp.wait, inlined: this is the hot loop of an expansion
            exp.deps[exp.entry.get(j, j)].add(i)
        else:
            exp.deps[exp.entry.get(i, i)].add(j)


def _bind_cross(
    exp: Expansion, resolver: _Resolver, node_pos: Mapping[str, int], mine: Sequence[int],
    targets: Sequence[str], dep: CrossDependency, *, forward: bool, where: tuple[str, str],
) -> None:
    """crossDepends (forward=False: mine wait for them) / crossDependedBy (forward=True) of a
    task's instances `mine`. The instances bound do not depend on which of `mine` is bound
    (except `self`, and never an instance to itself), so they are found once per dependency."""
    if dep.role == ["self"]:
        exp.bind(len(mine) * len(targets), *where)
        for i in mine:
            node = exp.instances[i][1]
            for target in targets:
                j = exp.index.get((target, node))
                if j is None:
                    j = exp.index.get((target, ANCHOR))
                if j is not None and j != i:
                    _link(exp, i, j, forward)
        return
    allowed = None if dep.role == ["*"] else set(resolver.resolve(dep.role))
    bound: list[int] = []
    for target in targets:
        for j in exp.by_task.get(target, ()):
            other = exp.instances[j][1]
            if other == ANCHOR or allowed is None or other in allowed:
                bound.append(j)
    if dep.policy == "any":
        anchors = [j for j in bound if exp.instances[j][1] == ANCHOR]
        placed = [j for j in bound if exp.instances[j][1] != ANCHOR]
        if placed:
            first = min(node_pos[exp.instances[j][1]] for j in placed)
            placed = [j for j in placed if node_pos[exp.instances[j][1]] == first]
        bound = anchors + placed
    exp.bind(len(mine) * len(bound), *where)
    for i in mine:
        for j in bound:
            if j != i:
                _link(exp, i, j, forward)


def _link(exp: Expansion, i: int, j: int, forward: bool) -> None:
    if forward:
        exp.wait(j, i)
    else:
        exp.wait(i, j)


def _add_members(exp: Expansion, task_id: str, groups: Sequence[str], group_nodes: Mapping[str, list[str]],
                 before: dict[str, set[str]]) -> None:
    """The instances of a task that are members of its groups (on each group's nodes). Where one
    instance is in several groups and one of them precedes another, it is a member of the earliest
    only (see the module's doc). `before`: each group's preceding groups, found once."""
    node_sets = {g: set(group_nodes[g]) for g in groups}
    for i in exp.by_task.get(task_id, ()):
        node = exp.instances[i][1]
        if node == ANCHOR:
            continue
        mine = [g for g in groups if node in node_sets[g]]
        if len(mine) > 1:
            for g in mine:
                if g not in before:
                    before[g] = _preceding_groups(exp, g)
            mine = [g for g in mine if not any(other in before[g] for other in mine if other != g)]
        for g in mine:
            exp.members[g].append(i)


def _preceding_groups(exp: Expansion, group_id: str) -> set[str]:
    """The groups whose end a group's start waits for, through anchors (groups and stages),
    before members are ordered."""
    seen = {exp.starts[group_id]}
    stack = [exp.starts[group_id]]
    found: set[str] = set()
    while stack:
        for d in exp.deps[stack.pop()]:
            task, node = exp.instances[d]
            if node != ANCHOR or d in seen:
                continue
            seen.add(d)
            stack.append(d)
            if task in exp.starts and task != group_id:
                found.add(task)
    return found


def _order_members(exp: Expansion, group_id: str, members: Sequence[int]) -> None:
    """Every member after the group's start and before its end, with two edges at most per member:
    the start precedes the members that wait for no other member, the end follows the members that
    no other member waits for (the rest follow and precede them)."""
    start, end = exp.starts[group_id], exp.index[(group_id, ANCHOR)]
    inside = set(members)
    has_before: set[int] = set()
    has_after: set[int] = set()
    for m in members:
        for d in exp.deps[m]:
            if d in inside:
                has_before.add(m)
                has_after.add(d)
    for m in members:
        if m not in has_before:
            exp.deps[m].add(start)
        if m not in has_after:
            exp.deps[end].add(m)
