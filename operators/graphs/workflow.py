"""The workflow that executes a run's plan (`operators.graphs.plan`): the executor's contract.

Why a module of its own: the plan decides what runs where and why (pure planning rules); this one
only translates that decision into a `pipelines.model.Workflow` (steps, their dependencies through
nodes outside the subset, barriers between graph types, targets and tolerance), the one place that
knows what the SSH executor expects of a step.
"""

from __future__ import annotations

from typing import Any

from operators.graphs.expansion import GraphNode
from operators.graphs.plan import NOOP_STEP, GraphPlan, Plan, PlanError, step_id
from pipelines.model import Dependency, Step, Tolerance, Workflow, check_name


def to_workflow(
    plan: Plan,
    *,
    known_hosts: str,
    private_key_ref: str,
    name: str = "",
    parallelism: int = 8,
) -> Workflow:
    """The workflow executing a plan: one step per task instance of the run (a single target, the
    node; anchors untargeted), each waiting for exactly the instances it depends on (`all` over a
    single-target step is that one instance). Graph types run in order: a barrier step
    `<type>::done` waits for the graph's last steps and the next graph's first steps wait for it.

    Executor contract: planned work is `ssh.<type>` with the task's parameters unchanged (plus
    `noop: true` for puppet in a noop run), `retries` from parameters.retries, `timeout_seconds`
    from parameters.timeout; everything else is a `noop` step. A group's `faultTolerance` becomes the
    workflow's `tolerance` for its tasks' steps: a node failing within it is taken out of the run
    (its later tasks skipped) and the rest goes on. Targets carry `ssh_address`,
    `ssh_port`, `ssh_user`; `ssh_known_hosts` is a variable and `ssh_private_key` a secret
    reference, both given by the caller."""
    by_name = {n.name: n for g in plan.graphs for n in g.expansion.nodes}
    steps: list[Step] = []
    targets: dict[str, dict[str, str]] = {}
    previous_barrier: str | None = None
    problems: list[str] = []
    for graph in plan.graphs:
        exp = graph.expansion
        ids = [step_id(graph.prefix, t, n) for t, n in exp.instances]
        deps = _contracted(graph)
        has_dependents: set[int] = set()
        for i in range(len(exp.instances)):
            if graph.included(i):
                has_dependents.update(deps[i])
        graph_steps: list[str] = []
        for i, (task_id, node) in enumerate(exp.instances):
            if not graph.included(i):
                continue
            task = exp.task(task_id)
            state, reason = graph.states[i]
            if node and node not in targets:
                try:
                    check_name(node, "node")
                except ValueError as error:
                    problems.append(str(error))
                    continue
                targets[node] = _target(by_name[node], problems)
            depends = [Dependency(step=ids[d], targets="all") for d in sorted(deps[i])]
            if not depends and previous_barrier is not None:
                depends = [Dependency(step=previous_barrier, targets="all")]
            params: dict[str, Any] = {}
            retries = 0
            timeout: float | None = None
            step_type = graph.step_types[i]
            if state == "planned":
                params = dict(task.parameters)
                if plan.noop and task.type == "puppet":
                    params["noop"] = True
                retries = _int(task.parameters.get("retries"), 0, 100)
                timeout = _timeout(task.parameters.get("timeout"))
            else:
                params = {"reason": reason or "", "task_type": task.type}
            steps.append(Step(
                id=ids[i], type=step_type, name=f"{task_id} on {node}" if node else task_id,
                parameters=params, target=[node] if node else [], depends_on=depends,
                retries=retries, timeout_seconds=timeout,
            ))
            graph_steps.append(ids[i])
        sinks = [ids[i] for i in range(len(exp.instances)) if graph.included(i) and i not in has_dependents]
        if len(plan.graphs) > 1 and graph is not plan.graphs[-1]:
            barrier = f"{graph.prefix}::done"
            steps.append(Step(id=barrier, type=NOOP_STEP, name=f"graph {graph.graph_type} done",
                              parameters={"reason": "graph barrier"},
                              depends_on=[Dependency(step=s, targets="all") for s in sinks]
                              or ([Dependency(step=previous_barrier, targets="all")] if previous_barrier else [])))
            previous_barrier = barrier
    if problems:
        raise PlanError(problems)
    present = {step.id for step in steps}
    tolerance = [Tolerance(steps=[s for s in group.steps if s in present], may_fail=group.may_fail)
                 for groups in plan.fault_tolerance().values() for group in groups.values()
                 if group.may_fail > 0 and any(s in present for s in group.steps)]
    return Workflow(
        name=name, variables={"ssh_known_hosts": known_hosts}, secrets={"ssh_private_key": private_key_ref},
        targets=targets, steps=steps, parallelism=parallelism, tolerance=tolerance,
    )


def _contracted(graph: GraphPlan) -> list[set[int]]:
    """Each included instance's dependencies among included instances, passing through excluded
    ones (instances of unselected nodes): A -> X(out) -> B becomes A -> B."""
    exp = graph.expansion
    frontier: dict[int, set[int]] = {}

    def through(x: int) -> set[int]:
        # iterative post-order over excluded instances, memoized
        stack = [x]
        while stack:
            top = stack[-1]
            if top in frontier:
                stack.pop()
                continue
            pending = [d for d in exp.deps[top] if not graph.included(d) and d not in frontier]
            if pending:
                stack.extend(pending)
                continue
            out: set[int] = set()
            for d in exp.deps[top]:
                if graph.included(d):
                    out.add(d)
                else:
                    out |= frontier[d]
            frontier[top] = out
            stack.pop()
        return frontier[x]

    result: list[set[int]] = []
    for i, deps in enumerate(exp.deps):
        if not graph.included(i):
            result.append(set())
            continue
        mine: set[int] = set()
        for d in deps:
            if graph.included(d):
                mine.add(d)
            else:
                mine |= through(d)
        result.append(mine)
    return result


def _target(node: GraphNode, problems: list[str]) -> dict[str, str]:
    address = node.address or node.fqdn
    if not address:
        problems.append(f"node {node.name!r} has no address (nor fqdn): tasks cannot reach it")
        address = ""
    return {"ssh_address": address, "ssh_port": str(node.ssh_port), "ssh_user": node.ssh_user}


def _int(value: Any, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return low
    return max(low, min(high, number))


def _timeout(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


__all__ = ["to_workflow"]
