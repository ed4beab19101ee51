"""Which task instances a run's subgraphs cover (Fuel's `start` / `end` task references, with node ranges).

A module of its own because it is one graph question, apart from the plan's other rules: the instances
forward of a subgraph's start and backward of its end, over the expanded graph's edges. The plan
(`operators.graphs.plan`) asks it, then marks the instances outside as skipped (`outside subgraph`);
`models.subgraph_problems` checks the references themselves before.
"""

from __future__ import annotations

from collections.abc import Sequence

from operators.graphs.expansion import ANCHOR, Expansion
from operators.graphs.models import Subgraph, compile_ref, is_regex


def _matches(ref: str, ids: Sequence[str]) -> list[str]:
    if is_regex(ref):
        pattern = compile_ref(ref)  # RE2: checked by `subgraph_problems` first
        return [i for i in ids if pattern.search(i)]
    return [ref] if ref in ids else []


def subgraph_members(exp: Expansion, subgraphs: Sequence[Subgraph], hits: list[bool]) -> set[int]:
    """Instances forward of `start` (and backward of `end`) of any subgraph: start or end alone
    bound one side; both, the instances between them. Sets `hits[2k]` (`hits[2k + 1]`) when subgraph k's
    start (end) matched a task, so that the plan can name the references that match nothing."""
    dependents: list[list[int]] = [[] for _ in exp.instances]
    for i, deps in enumerate(exp.deps):
        for d in deps:
            dependents[d].append(i)
    ids = list(exp.tasks)
    members: set[int] = set()
    everything = set(range(len(exp.instances)))
    backward = [list(d) for d in exp.deps]
    for k, sub in enumerate(subgraphs):
        part = everything
        for side, refs, on, edges in ((0, sub.start, sub.start_nodes, dependents), (1, sub.end, sub.end_nodes,
                                                                                     backward)):
            if not refs:
                continue
            seeds = _seeds(exp, refs, on, ids)
            hit = bool(seeds) if on is not None else any(_matches(ref, ids) for ref in refs)
            hits[2 * k + side] = hits[2 * k + side] or hit
            part = part & _closure(seeds, edges)
        members |= part
    return members


def _seeds(exp: Expansion, refs: Sequence[str], nodes: Sequence[str] | None, ids: Sequence[str]) -> list[int]:
    """The instances a subgraph's side starts from: those of the tasks `refs` match, on `nodes` when given (a
    node range, Fuel's `task/nodes`; an anchor, which has no node, is on every side's nodes)."""
    chosen = None if nodes is None else set(nodes)
    return [i for ref in refs for t in _matches(ref, ids) for i in exp.by_task.get(t, ())
            if chosen is None or exp.instances[i][1] == ANCHOR or exp.instances[i][1] in chosen]


def _closure(seeds: Sequence[int], edges: Sequence[Sequence[int]]) -> set[int]:
    seen = set(seeds)
    stack = list(seeds)
    while stack:
        for nxt in edges[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


__all__ = ["subgraph_members"]
