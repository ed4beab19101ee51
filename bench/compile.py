"""Blueprint compile time against size: 50, 200 and 800 services, with tasks and macros.

The compiler must grow about linearly with the blueprint: it runs on every spec change of a
Blueprint (and its validation part in the admission webhook). Each generated blueprint has, per
four services, one deployment with a Local substrate (readiness check) and a package (install and
uninstall). Each service has a variable, a create action of four tasks (a setvar publishing its
url, an exec reading its own variable, a callRunbook to a shared named runbook, an exec reading
the previous service's url: an implicit dependency) with an edge, start and stop tasks, and
`dependsOn` on an earlier service. There is one application-level user action.

For each size it prints the best CPU time of `--repeat` runs (after one warm-up) of model
validation, `spec_problems` (the webhook's check) and `compile_blueprint` (semantic checks
included), the compile time per service, the counts (tasks, edges, macro decisions) and the
size of the status it writes (marked * when too large for the actions' tasks and edges); then
the ratio of compile time per service at the largest size to the smallest. Linear growth gives
a ratio near 1.

The "no gc" column is the same compile with Python's cyclic garbage collector off during the run.
Full collections start once the process holds enough objects (between 200 and 800 services
here) and each walks every live object; that column shows the compiler's own work apart from
them.

    .venv/bin/python bench/compile.py [--sizes 50 200 800] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from operators.calm.compiler import compile_blueprint
from operators.calm.models import BlueprintSpec
from operators.calm.validation import spec_problems

T = TypeVar("T")
PER_DEPLOYMENT = 4


def blueprint(services: int) -> dict[str, Any]:
    """A blueprint of `services` services, as a user would write it (camelCase)."""
    spec: dict[str, Any] = {
        "variables": [{"name": "env", "value": "bench"}],
        "substrates": [], "packages": [], "services": [], "deployments": [],
        "runbooks": [{"name": "audit", "tasks": [
            {"name": "log", "type": "exec", "script": "echo audit @@{calm_application_name}@@ @@{env}@@"}]}],
        "actions": [{"name": "report", "tasks": [
            {"name": "count", "type": "exec", "script": "echo @@{s0.url}@@ @@{env}@@"}]}],
    }
    for d in range((services + PER_DEPLOYMENT - 1) // PER_DEPLOYMENT):
        members = [f"s{i}" for i in range(d * PER_DEPLOYMENT, min(services, (d + 1) * PER_DEPLOYMENT))]
        spec["substrates"].append({"name": f"sub{d}", "type": "Local",
                                   "readiness": {"type": "exec", "script": "test -d /tmp", "retries": 3}})
        spec["packages"].append({
            "name": f"pkg{d}",
            "install": {"tasks": [{"name": "install", "type": "exec", "script": "echo install on @@{address}@@"}]},
            "uninstall": {"tasks": [{"name": "uninstall", "type": "exec", "script": "echo uninstall"}]},
        })
        spec["deployments"].append({"name": f"dep{d}", "substrate": f"sub{d}", "packages": [f"pkg{d}"],
                                    "services": members, "minReplicas": 1, "maxReplicas": 3})
    for i in range(services):
        previous = f"s{i - 1}" if i else None
        create = [
            {"name": "publish", "type": "setvar", "variables": ["url"],
             "script": f"echo url=http://@@{{address}}@@:{8000 + i}/@@{{name_{i}}}@@"},
            {"name": "configure", "type": "exec", "script": f"echo @@{{name_{i}}}@@ @@{{env}}@@ > /tmp/s{i}.conf"},
            {"name": "audit", "type": "callRunbook", "runbook": "audit"},
        ]
        if previous is not None:
            create.append({"name": "link", "type": "exec", "script": f"echo upstream @@{{{previous}.url}}@@",
                           "retries": 2, "timeoutSeconds": 30})
        spec["services"].append({
            "name": f"s{i}",
            "dependsOn": [f"s{i // 2}"] if i else [],
            "variables": [{"name": f"name_{i}", "value": f"service-{i}"}],
            "actions": [
                {"name": "create", "tasks": create, "edges": [{"from": "configure", "to": "publish"}]},
                {"name": "start", "tasks": [{"name": "start", "type": "exec", "script": "echo start @@{url}@@"}]},
                {"name": "stop", "tasks": [{"name": "stop", "type": "exec", "script": "echo stop"}]},
            ],
        })
    return spec


def best(fn: Callable[[], T], repeat: int, *, collector: bool = True) -> tuple[float, T]:
    """The best CPU time of `repeat` runs after one warm-up, and the last result.

    CPU time of this process (not wall time): on a shared machine other processes inflate wall
    times at random, which drowns a trend across sizes. Each run starts after a full garbage
    collection, so that one run does not pay for the garbage of the previous one; collections
    during a run are part of its cost, unless `collector` is false (the cyclic collector is then
    off during the run: what is left is the algorithm's own work)."""
    result = fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        if not collector:
            gc.disable()
        try:
            start = time.process_time()
            result = fn()
            times.append(time.process_time() - start)
        finally:
            gc.enable()
    return min(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 800])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    print(f"{'services':>8} {'validate':>10} {'webhook':>10} {'compile':>10} {'per svc':>9} {'no gc':>9} "
          f"{'tasks':>7} {'edges':>7} {'macros':>7} {'status':>9}")
    per_service: dict[int, float] = {}
    per_service_no_gc: dict[int, float] = {}
    truncated = False
    for size in args.sizes:
        raw = blueprint(size)
        validate, spec = best(partial(BlueprintSpec.model_validate, raw), args.repeat)
        webhook, problems = best(partial(spec_problems, raw), args.repeat)
        assert problems == [], problems[:3]
        took, result = best(partial(compile_blueprint, spec, None), args.repeat)
        assert result.ok, result.errors[:3]
        bare, _ = best(partial(compile_blueprint, spec, None), args.repeat, collector=False)
        per_service_no_gc[size] = bare / size
        written = result.status(True)
        status = json.dumps(written, separators=(",", ":"))
        mark = "*" if written["actionsTruncated"] else " "
        truncated = truncated or bool(written["actionsTruncated"])
        tasks = sum(len(a.tasks) for a in result.actions)
        edges = sum(len(a.edges) for a in result.actions)
        per_service[size] = took / size
        print(f"{size:>8} {validate * 1e3:>8.1f}ms {webhook * 1e3:>8.1f}ms {took * 1e3:>8.1f}ms "
              f"{took / size * 1e3:>7.3f}ms {bare / size * 1e3:>7.3f}ms {tasks:>7} {edges:>7} {len(result.macros):>7} "
              f"{len(status) / 1024:>7.0f}KB{mark}")
    small, large = min(per_service), max(per_service)
    ratio = per_service[large] / per_service[small]
    bare_ratio = per_service_no_gc[large] / per_service_no_gc[small]
    if truncated:
        print("* over the status size limit (etcd): written with the actions' tasks and edges left out")
    print(f"compile time per service, {large} vs {small} services: x{ratio:.2f}; "
          f"without the cyclic garbage collector: x{bare_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
