"""Deployment graph planning time against size: merge + expand + plan, then the workflow.

A run of a DeploymentGraph is planned before anything runs (and again when its graphs or its
environment change), so planning must stay well under a second at a realistic size and grow
linearly. The target (issue 16): <= 1 s for 200 tasks over 100 nodes (~20,000 task instances),
linear growth at 10x that.

Each generated graph is split over the three merge levels (a release graph with the stage
anchors and 75% of the tasks, a plugin with 15%, the environment with 10%, replacing a few
release tasks whole). Every task runs on every node and requires the previous task on the
same node; every 10th task also cross-depends on a controller task (policy all), every 10th+5
on one with policy any, and a quarter of the tasks have a yaql condition (8 distinct
expressions shared through the graph, as fuel-library shares them through YAML anchors),
evaluated against a last run whose data equals the new data except on half the keys. The nodes of
a role have the same data, and a condition is evaluated once for the nodes that read the same values
(issue 32); `--distinct` gives every node values of its own in every key read: the worst case. The
environment has 3 controllers and computes for the rest. Groups as fuel-library writes them
(issue 26): the release has the groups `controller` and `compute` (compute requires controller,
both required for deploy_end), four tasks in five name both groups (`groups: [controller,
compute]`: they run on every node, each instance a member of its node's group), the fifth runs
on '*' outside any group; so every compute node's grouped tasks wait for every controller's.

`--baseline DIR` plans the same graphs, in the same run, with the code of another checkout (a
worktree of main before group order: `git worktree add --detach /tmp/base 873d66b`), in a child
process, and prints each size's edges and times beside it with the ratio.

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
                                         [--process 5x3 200x100] [--baseline DIR] [--distinct]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
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
        where: dict[str, Any] = {"roles": ["*"]} if i % 5 == 0 else {"groups": ["controller", "compute"]}
        fields: dict[str, Any] = {
            "id": f"task-{i}", "type": "puppet" if i % 3 else "shell", "version": "2.1.0", **where,
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
    release += [Task.model_validate({"id": "controller", "type": "group", "roles": ["controller"],
                                     "requires": ["deploy_start"], "required_for": ["deploy_end"]}),
                Task.model_validate({"id": "compute", "type": "group", "roles": ["compute"],
                                     "requires": ["controller"], "required_for": ["deploy_end"]})]
    plugin_from, env_from = int(count * 0.75), int(count * 0.9)
    release += [make(i, "release") for i in range(plugin_from)]
    plugin = [make(i, "plugin") for i in range(plugin_from, env_from)]
    env = [make(i, "env") for i in range(env_from, count)] + [make(i, "env") for i in range(0, plugin_from, 50)]
    return release, plugin, env


def nodes(count: int) -> list[GraphNode]:
    return [GraphNode(f"node-{n}", ("controller",) if n < 3 else ("compute",), address=f"10.0.{n // 250}.{n % 250}")
            for n in range(count)]


DISTINCT = False
"""`--distinct`: every node's data differ in every key the conditions read (no evaluation is shared)."""


def data(node: GraphNode, *, last: bool) -> dict[str, Any]:
    """A node's data: the same for the nodes of a role (as a role's configuration mostly is), or, with
    `--distinct`, different on every node in every key a condition reads (the planner's worst case:
    a condition is evaluated once for the nodes that read the same values)."""
    own = f"{node.name}-{last}" if DISTINCT else ""
    return {"a": 1, "b": 2 if last else 3, "c": None, "d": {"e": 1}, "roles": list(node.roles), "flag": True,
            "nodes": {"n1": {"ip": "10.0.0.1"}, "n2": {"ip": "10.0.0.2" if last else "10.0.0.9"}},
            "list": [1, 2] if last else [1, 2, 3],
            **({"a": own, "b": own, "d": {"e": own}, "flag": own, "list": [own], "roles": [*node.roles, own],
                "nodes": {"n1": {"ip": own}}} if DISTINCT else {})}


def merge_and_plan(
    release: list[Task], plugin: list[Task], env: list[Task], node_list: list[GraphNode],
    node_data: dict[str, dict[str, Any]], last_data: dict[str, dict[str, Any]] | None,
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


def measure(size: str, repeat: int) -> dict[str, Any]:
    """One size: counts (instances, edges, of them the groups'), the best CPU times in seconds."""
    task_count, node_count = (int(x) for x in size.split("x"))
    release, plugin, env = tasks(task_count)
    node_list = nodes(node_count)
    node_data = {n.name: data(n, last=False) for n in node_list}
    last_data = {n.name: data(n, last=True) for n in node_list}
    merge_time, merged = best(partial(merge_graphs, release, [("plugin", plugin)], env), repeat)
    expand_time, exp = best(partial(expand, merged.tasks, node_list), repeat)
    plan_time, plan = best(partial(merge_and_plan, release, plugin, env, node_list, node_data, last_data), repeat)
    wf_time, wf = best(partial(to_workflow, plan, known_hosts="", private_key_ref="key"), max(1, repeat // 3))
    counts = plan.summary()
    assert len(wf.steps) == len(exp.instances) >= counts["instances"]
    # group order, where the code has it: the compute group's start waits for the controller group's end
    start = exp.index.get(("compute::start", ""))
    ordered = start is not None and exp.index[("controller", "")] in exp.deps[start]
    anchors = {i for i, (task, _) in enumerate(exp.instances) if task in ("controller", "compute")}
    if start is not None:
        anchors |= {start, exp.index[("controller::start", "")]}
    group_edges = sum(len(d) for i, d in enumerate(exp.deps) if i in anchors) + sum(
        1 for i, d in enumerate(exp.deps) if i not in anchors for j in d if j in anchors)
    return {"size": size, "instances": counts["instances"], "edges": counts["edges"], "group_edges": group_edges,
            "group_order": ordered, "merge": merge_time, "expand": expand_time, "plan": plan_time,
            "workflow": wf_time, "planned": counts["planned"], "skipped": counts["skipped"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["200x100", "2000x100"],
                        help="TASKSxNODES, e.g. 200x100 (default: 200x100 2000x100)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--execute", default="50x20", help="TASKSxNODES run with no-op steps ('' to skip)")
    parser.add_argument("--process", nargs="*", default=["5x3", "200x100"],
                        help="TASKSxNODES planned by the planner process (none to skip)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="a checkout whose code plans the same graphs too (in a child process), for the ratio")
    parser.add_argument("--json", action="store_true", help="only the sizes' figures, as one JSON line")
    parser.add_argument("--distinct", action="store_true",
                        help="every node's data differ in what the conditions read (no evaluation shared)")
    args = parser.parse_args(argv)
    global DISTINCT
    DISTINCT = args.distinct

    if args.json:
        print(json.dumps([measure(size, args.repeat) for size in args.sizes]))
        return 0
    print(f"{'tasks x nodes':>14} {'instances':>10} {'edges':>9} {'of groups':>9} {'merge':>9} {'expand':>9} "
          f"{'plan':>9} {'per inst':>9} {'workflow':>9} {'planned':>8} {'skipped':>8}")
    results = [measure(size, args.repeat) for size in args.sizes]
    for r in results:
        print(f"{r['size']:>14} {r['instances']:>10} {r['edges']:>9} {r['group_edges']:>9} {r['merge'] * 1e3:>7.1f}ms "
              f"{r['expand'] * 1e3:>7.0f}ms {r['plan'] * 1e3:>7.0f}ms {r['plan'] / r['instances'] * 1e6:>7.1f}us "
              f"{r['workflow'] * 1e3:>7.0f}ms {r['planned']:>8} {r['skipped']:>8}")
    first, last = results[0], results[-1]
    print(f"plan (merge + expand + plan) time per instance, {last['size']} vs {first['size']}: "
          f"x{(last['plan'] / last['instances']) / (first['plan'] / first['instances']):.2f} (linear growth: about 1)")
    print(f"group order (compute's tasks after all of controller's): {'yes' if first['group_order'] else 'NO'}; "
          f"target: plan of {first['size']} <= 1 s: {first['plan']:.2f} s")
    if args.baseline:
        baseline(args.baseline, args.sizes, args.repeat, results, args.distinct)
    if args.execute:
        execute(args.execute)
    for size in args.process:
        planner_process(size, args.repeat)
    return 0


def baseline(directory: str, sizes: list[str], repeat: int, results: list[dict[str, Any]], distinct: bool) -> None:
    """The same sizes planned by the code of `directory` (this script, that checkout's packages
    first on the path), beside this checkout's figures."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([directory, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, __file__, "--json", "--repeat", str(repeat), "--sizes", *sizes,
                           *(["--distinct"] if distinct else [])],
                          env=env, capture_output=True, text=True, check=True)
    theirs = {r["size"]: r for r in json.loads(done.stdout.strip().splitlines()[-1])}
    print(f"against {directory} (the same graphs, its code):")
    for mine in results:
        other = theirs[mine["size"]]
        print(f"  {mine['size']}: edges {mine['edges']} vs {other['edges']} (x{mine['edges'] / other['edges']:.2f}), "
              f"expand {mine['expand'] * 1e3:.0f} vs {other['expand'] * 1e3:.0f} ms "
              f"(x{mine['expand'] / other['expand']:.2f}), "
              f"plan {mine['plan'] * 1e3:.0f} vs {other['plan'] * 1e3:.0f} ms "
              f"(x{mine['plan'] / other['plan']:.2f}), workflow {mine['workflow'] * 1e3:.0f} vs "
              f"{other['workflow'] * 1e3:.0f} ms; group order: {'yes' if mine['group_order'] else 'no'} vs "
              f"{'yes' if other['group_order'] else 'no'}")


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
