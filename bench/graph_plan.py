"""Deployment graph planning time against size: merge + expand + plan, then the workflow.

A run of a DeploymentGraph is planned before anything runs (and again when its graphs or its
environment change), so planning must stay well under a second at a realistic size and grow
linearly. The target (issue 16): <= 1 s for 200 tasks over 100 nodes (~20,000 task instances),
linear growth at 10x that.

Each generated graph is split over the three merge levels (a release graph with the stage
anchors and 75% of the tasks, a plugin with 15%, the environment with 10%, replacing a few
release tasks whole). Every task runs on every node ('*') and requires the previous task on the
same node; every 10th task also cross-depends on a controller task (policy all), every 10th+5
on one with policy any, and a quarter of the tasks have a yaql condition (8 distinct
expressions shared through the graph, as fuel-library shares them through YAML anchors),
evaluated against a last run whose data equals the new data except on half the keys. The
environment has 3 controllers and computes for the rest.

For each size it prints the best CPU time of `--repeat` runs (after one warm-up) of merge,
expand, plan (expand included: the plan expands) and to_workflow (the pipelines Workflow,
validation included), the counts, and at the end the ratio of plan time per instance at the
largest size to the smallest (linear growth: near 1).

Then the execution overhead: the workflow of a smaller plan (`--execute`, default 50 tasks over 20
nodes, ~1,000 steps) run by the workflow engine with every step a no-op (the SSH work replaced, the
graph's shape kept: per-node chains, cross dependencies, anchors), time and CPU per step, printed
beside `workflow_overhead.py`'s target for an App's workflow (<= 1 ms per step at 5,000 steps).

Then what planning out of the event loop costs (issue 25): the same plan made by the planner
process the operator starts (`operators.graphs.planner.plan_in_process`: a process under CPU, memory
and wall limits, the plan file written), per size in `--process` (default 5x3, 200x100): the best
wall time beside the plan made in-process and written the same way, and the operator's own CPU.

    .venv/bin/python bench/graph_plan.py [--sizes 200x100 2000x100] [--repeat 3] [--execute 50x20]
                                         [--process 5x3 200x100]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from operators.graphs import (
    STAGES,
    GraphNode,
    GraphSelection,
    Plan,
    Task,
    expand,
    make_plan,
    merge_graphs,
    to_workflow,
)

T = TypeVar("T")
CONDITIONS = [
    "changed($.a)", "changedAny($.a, $.b, $.get('c'))", "changedAll($.b, $.d.e)", "not changed($.d)",
    "'controller' in $.roles and changed($.b)", "changedAny($.nodes.values().select($.ip))",
    "len(added($.list)) > 0", "$.flag and changed($.get('flag'))",
]


def tasks(count: int) -> tuple[list[Task], list[Task], list[Task]]:
    """(release, plugin, environment) task lists for `count` work tasks."""
    def make(i: int, level: str) -> Task:
        fields: dict[str, Any] = {
            "id": f"task-{i}", "type": "puppet" if i % 3 else "shell", "version": "2.1.0", "roles": ["*"],
            "requires": [f"task-{i - 1}" if i else "deploy_start"], "required_for": ["deploy_end"],
            "parameters": {"puppet_manifest": f"/etc/puppet/{level}/{i}.pp", "timeout": 600, "retries": 1},
        }
        if i % 10 == 0 and i:
            fields["cross_depends"] = [{"name": f"ctl-{(i // 10) % 5}", "role": ["controller"]}]
        if i % 10 == 5:
            fields["cross_depends"] = [{"name": f"/^ctl-{(i // 10) % 5}$/", "role": ["/contr/"], "policy": "any"}]
        if i % 4 == 1:
            fields["condition"] = {"yaql_exp": CONDITIONS[(i // 4) % len(CONDITIONS)]}
        return Task.model_validate(fields)

    release = [Task.model_validate({"id": s, "type": "stage", "requires": [STAGES[k - 1]] if k else []})
               for k, s in enumerate(STAGES)]
    release += [Task.model_validate({"id": f"ctl-{k}", "type": "puppet", "roles": ["controller"],
                                     "requires": ["deploy_start"], "required_for": ["deploy_end"]})
                for k in range(5)]
    plugin_from, env_from = int(count * 0.75), int(count * 0.9)
    release += [make(i, "release") for i in range(plugin_from)]
    plugin = [make(i, "plugin") for i in range(plugin_from, env_from)]
    env = [make(i, "env") for i in range(env_from, count)] + [make(i, "env") for i in range(0, plugin_from, 50)]
    return release, plugin, env


def nodes(count: int) -> list[GraphNode]:
    return [GraphNode(f"node-{n}", ("controller",) if n < 3 else ("compute",), address=f"10.0.{n // 250}.{n % 250}")
            for n in range(count)]


def data(node: GraphNode, *, last: bool) -> dict[str, Any]:
    return {"a": 1, "b": 2 if last else 3, "c": None, "d": {"e": 1}, "roles": list(node.roles), "flag": True,
            "nodes": {"n1": {"ip": "10.0.0.1"}, "n2": {"ip": "10.0.0.2" if last else "10.0.0.9"}},
            "list": [1, 2] if last else [1, 2, 3]}


def merge_and_plan(
    release: list[Task], plugin: list[Task], env: list[Task], node_list: list[GraphNode],
    node_data: dict[str, dict[str, Any]], last_data: dict[str, dict[str, Any]],
) -> Plan:
    """What a run costs before its workflow: merge, expand (inside make_plan), states and conditions."""
    merged = merge_graphs(release, [("plugin", plugin)], env)
    return make_plan([(GraphSelection(type="default"), merged.tasks)], node_list,
                     node_data=node_data, last_data=last_data)


def best(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The best CPU time of `repeat` runs after one warm-up (see bench/compile.py for why CPU time)."""
    result = fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = fn()
        times.append(time.process_time() - start)
    return min(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["200x100", "2000x100"],
                        help="TASKSxNODES, e.g. 200x100 (default: 200x100 2000x100)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--execute", default="50x20", help="TASKSxNODES run with no-op steps ('' to skip)")
    parser.add_argument("--process", nargs="*", default=["5x3", "200x100"],
                        help="TASKSxNODES planned by the planner process (none to skip)")
    args = parser.parse_args(argv)

    print(f"{'tasks x nodes':>14} {'instances':>10} {'edges':>9} {'merge':>9} {'expand':>9} {'plan':>9} "
          f"{'per inst':>9} {'workflow':>9} {'planned':>8} {'skipped':>8}")
    per_instance: dict[str, float] = {}
    for size in args.sizes:
        task_count, node_count = (int(x) for x in size.split("x"))
        release, plugin, env = tasks(task_count)
        node_list = nodes(node_count)
        node_data = {n.name: data(n, last=False) for n in node_list}
        last_data = {n.name: data(n, last=True) for n in node_list}
        merge_time, merged = best(partial(merge_graphs, release, [("plugin", plugin)], env), args.repeat)
        expand_time, exp = best(partial(expand, merged.tasks, node_list), args.repeat)
        plan_time, plan = best(partial(merge_and_plan, release, plugin, env, node_list, node_data, last_data),
                               args.repeat)
        wf_time, wf = best(partial(to_workflow, plan, known_hosts="", private_key_ref="key"), max(1, args.repeat // 3))
        counts = plan.summary()
        per_instance[size] = plan_time / counts["instances"]
        print(f"{size:>14} {counts['instances']:>10} {counts['edges']:>9} {merge_time * 1e3:>7.1f}ms "
              f"{expand_time * 1e3:>7.0f}ms {plan_time * 1e3:>7.0f}ms {per_instance[size] * 1e6:>7.1f}us "
              f"{wf_time * 1e3:>7.0f}ms {counts['planned']:>8} {counts['skipped']:>8}")
        assert len(wf.steps) == counts["instances"] and len(exp.instances) == counts["instances"]
    first, last = args.sizes[0], args.sizes[-1]
    print(f"plan (merge + expand + plan) time per instance, {last} vs {first}: "
          f"x{per_instance[last] / per_instance[first]:.2f} (linear growth: about 1)")
    if args.execute:
        execute(args.execute)
    for size in args.process:
        planner_process(size, args.repeat)
    return 0


def planner_process(size: str, repeat: int) -> None:
    """A plan made in the planner process against the same plan made in this one (both write the file)."""
    import asyncio
    import json
    import tempfile
    from pathlib import Path

    from operators.graphs.planner import make_plan_document, plan_in_process

    task_count, node_count = (int(x) for x in size.split("x"))
    release, plugin, env = tasks(task_count)
    node_list = nodes(node_count)
    merged = merge_graphs(release, [("plugin", plugin)], env).tasks
    payload = {"spec": {"environment": "e", "graphs": [{"type": "default"}], "dryRun": True},
               "merged": {"default": [t.model_dump(mode="json", by_alias=True, exclude_defaults=True) for t in merged]},
               "nodes": [{"name": n.name, "roles": list(n.roles), "address": n.address} for n in node_list],
               "nodeData": {n.name: data(n, last=False) for n in node_list},
               "lastData": {n.name: data(n, last=True) for n in node_list}, "privateKeyRef": "key", "name": "ns/run"}

    async def variables() -> dict[str, str]:
        return {"ssh_known_hosts": ""}

    with tempfile.TemporaryDirectory() as tmp:
        def inside() -> None:
            document, _ = make_plan_document(payload)
            (Path(tmp) / "in.json").write_text(json.dumps(document))

        def outside() -> float:
            cpu = time.process_time()
            asyncio.run(plan_in_process(payload, Path(tmp) / "out.json", variables))
            return time.process_time() - cpu

        walls: dict[str, float] = {}
        operator_cpu = 0.0
        for name, fn in (("in-process", inside), ("planner process", outside)):
            fn()
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                result = fn()
                times.append(time.perf_counter() - started)
                if isinstance(result, float):
                    operator_cpu = result
            walls[name] = min(times)
    print(f"planning out of the event loop, {size}: {walls['planner process']:.2f} s in the planner process, "
          f"{walls['in-process']:.2f} s in-process (+{walls['planner process'] - walls['in-process']:.2f} s per plan); "
          f"the operator's CPU {operator_cpu * 1e3:.0f} ms instead of all of it")


def execute(size: str) -> None:
    """Run a plan's workflow with no-op steps through the engine: the overhead per task instance."""
    import tempfile
    from pathlib import Path

    from pipelines.model import Workflow
    from pipelines.runner import Runner

    task_count, node_count = (int(x) for x in size.split("x"))
    release, plugin, env = tasks(task_count)
    node_list = nodes(node_count)
    plan = merge_and_plan(release, plugin, env, node_list, {n.name: data(n, last=False) for n in node_list}, None)
    built = to_workflow(plan, known_hosts="", private_key_ref="key").model_dump(by_alias=True, mode="json")
    for step in built["steps"]:
        step.update(type="noop", parameters={}, retries=0, timeoutSeconds=None)
    workflow = Workflow.model_validate({**built, "secrets": {}, "parallelism": 8})
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(workflow, "bench-graph", Path(tmp))
        started, cpu = time.perf_counter(), time.process_time()
        outcome = runner.run()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    steps = len(workflow.steps)
    if outcome.phase != "Succeeded":
        raise SystemExit(f"the no-op run ended {outcome.phase}: {outcome.message}")
    print(f"execution, {size} ({steps} no-op steps, parallelism 8): {elapsed:.2f} s, "
          f"{elapsed / steps * 1e3:.2f} ms/step wall, {cpu / steps * 1e3:.2f} ms/step CPU "
          f"(an App's workflow: target <= {TARGET_MS_PER_STEP:.0f} ms/step at 5,000 steps, workflow_overhead.py)")


TARGET_MS_PER_STEP = 1.0


if __name__ == "__main__":
    sys.exit(main())
