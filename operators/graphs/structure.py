"""A graph's structure at the level of its tasks, before any node: which task waits for which, the
references that name no task, and the cycles (docs/graphs.md, "What is refused, and when").

A run expands a merged graph over the environment's nodes (`operators.graphs.expansion`) and refuses
unknown references and cycles of task instances then. Most of that is known earlier, from the tasks
alone, and is said where it becomes known:

- **At upload** (`graph_cycle`, called by `models.check_tasks`: the admission webhook, `stead graph upload`,
  the REST API): a cycle among one graph's own tasks. Its edges are the same-node ones: `requires`,
  `requiredFor`, and `crossDepends` / `crossDependedBy` of role `self`. Such a cycle deadlocks every node
  that has the roles of its tasks, whatever the other levels add (a level may replace a task whole, but
  the graph is wrong for every environment that does not). Fuel's older validator refused task cycles the
  same way, whatever the roles. A reference to a task the graph does not have is **not** refused there: a
  plugin task may require a release task, a release task may name one that a plugin brings.
- **At merge** (`merged_problems`, called by `kept.merge_type` when an Environment's graphs are merged):
  every reference that matches no task of the merged graph (release < plugins < environment), and a cycle
  across levels. The Environment's `GraphsMerged` condition says so, naming the tasks and their levels, and
  a run of that type fails with the same words.
- **At planning** (the run): cycles through cross dependencies of other roles, which depend on the nodes
  (`A` on computes waiting for `B` on controllers and back).

Fuel dropped a dependency on a task that exists nowhere without a word; Stead refuses it (at merge). What
Fuel dropped and Stead keeps dropping: a dependency on a task that exists but has no instance on the node
(a controller task required by a compute task), and (the rule of a subset) one on a node outside the run.

`/regex/` references cost a search per task id: past `MAX_SEARCHES` (hostile sizes: admission and the
merge run in the operator's event loop) the rest are not followed here, and the run finds what they hide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from operators.graphs.models import Task, compile_ref, is_regex
from operators.graphs.regexes import RegexError
from pipelines.model import find_cycle

MAX_SEARCHES = 25_000
"""Regex searches (references x task ids) one check may make: about 0.1 s (RE2's Python binding, some 5 us a
search). fuel-library's graphs need a few thousand."""


class SearchesSpent(Exception):
    """A matcher's budget of regex searches is spent."""


class TaskMatcher:
    """Task references (an id or /regex/) to the ids of a graph, each resolved once; with a `budget`, at
    most that many regex searches in all (then `SearchesSpent`)."""

    def __init__(self, ids: Sequence[str], budget: int | None = None) -> None:
        self.ids = list(ids)
        self.known = set(ids)
        self.budget = budget
        self._cache: dict[str, list[str]] = {}

    def match(self, ref: str) -> list[str]:
        found = self._cache.get(ref)
        if found is None:
            if is_regex(ref):
                if self.budget is not None:
                    if self.budget < len(self.ids):
                        raise SearchesSpent
                    self.budget -= len(self.ids)
                try:
                    pattern: Any = compile_ref(ref)
                except RegexError:
                    pattern = None
                found = [i for i in self.ids if pattern is not None and pattern.search(i)]
            else:
                found = [ref] if ref in self.known else []
            self._cache[ref] = found
        return found


def _waits(tasks: Sequence[Task], matcher: TaskMatcher, unknown: list[str] | None,
           origin: Mapping[str, str]) -> dict[str, set[str]]:
    """Task id -> the ids it waits for on its own node. References that match nothing are listed in
    `unknown` (when given), in the words of the run's expansion; regexes past the budget are skipped."""
    waits: dict[str, set[str]] = {t.id: set() for t in tasks}

    def targets(task: Task, field: str, ref: str) -> list[str]:
        try:
            found = matcher.match(ref)
        except SearchesSpent:
            return []
        if not found and unknown is not None:
            what = "no task of the merged graph matches" if is_regex(ref) else "which is not in the merged graph"
            unknown.append(f"task {task.id!r}{_of(task.id, origin)}: {field} {ref!r}, {what}")
        return [t for t in found if t != task.id and t in waits]

    for task in tasks:
        for ref in task.requires:
            waits[task.id].update(targets(task, "requires", ref))
        for ref in task.required_for:
            for target in targets(task, "requiredFor", ref):
                waits[target].add(task.id)
        for dep in task.cross_depends:
            found = targets(task, "crossDepends", dep.name)
            if dep.role == ["self"]:
                waits[task.id].update(found)
        for dep in task.cross_depended_by:
            found = targets(task, "crossDependedBy", dep.name)
            if dep.role == ["self"]:
                for target in found:
                    waits[target].add(task.id)
        if unknown is not None and task.type == "group":
            unknown.extend(f"group {task.id!r}{_of(task.id, origin)}: tasks names {sub!r}, which is not in the merged "
                           "graph" for sub in task.tasks if sub not in matcher.known)
    return waits


def _of(task_id: str, origin: Mapping[str, str]) -> str:
    return f" (of {origin[task_id]})" if task_id in origin else ""


def _cycle_text(waits: Mapping[str, Iterable[str]], origin: Mapping[str, str]) -> str | None:
    cycle = find_cycle({task: sorted(deps) for task, deps in waits.items()})
    if not cycle:
        return None
    path = " -> ".join(f"{t}{_of(t, origin)}" if origin else t for t in cycle)
    return ("dependency cycle among tasks (each waits for the next on a node that runs them, through requires, "
            f"requiredFor or a cross dependency of role self): {path}")


def graph_cycle(tasks: Sequence[Task], budget: int = MAX_SEARCHES) -> str | None:
    """A cycle among the tasks of one graph (references to tasks it does not have are left to the merge),
    as a message naming them in order; None when there is none (or ids repeat: that is said first)."""
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        return None
    return _cycle_text(_waits(tasks, TaskMatcher(ids, budget), None, {}), {})


def merged_problems(tasks: Sequence[Task], origin: Mapping[str, str] | None = None,
                    budget: int = MAX_SEARCHES) -> list[str]:
    """What a merged graph of one type gets wrong whatever the nodes: every reference that matches no
    task of it, then (when there are none) a cycle; each naming the tasks and, with `origin`, the level
    each came from (`release 'r1'`, `plugin 'lma'`, `environment 'env'`)."""
    where = dict(origin or {})
    unknown: list[str] = []
    waits = _waits(tasks, TaskMatcher([t.id for t in tasks], budget), unknown, where)
    if unknown:
        return unknown
    cycle = _cycle_text(waits, where)
    return [cycle] if cycle else []
