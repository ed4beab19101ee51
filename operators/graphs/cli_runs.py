"""`stead graph execute|plan`: a GraphRun made from the flags, after the checks a run would fail; `plan` waits
for the operator to plan it as a dry run. Imported when one of them runs."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from operators import API_VERSION
from operators.graphs.api import environment_graph_types
from operators.graphs.cli import COMMAND, RUNS
from operators.graphs.cli_objects import environment, object_path
from operators.graphs.cli_status import exit_code, final, status
from operators.graphs.kept import no_such_type
from operators.graphs.objects import graph_items
from operators.graphs.views import format_plan
from operators.runtime import ApiError, CommandError, Requester, dump, pause


def run_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The GraphRun's spec the flags of `execute` make (every type with the same nodes and tasks)."""
    graphs = []
    for graph_type in args.type:
        graph: dict[str, Any] = {"type": graph_type}
        if args.node:
            graph["nodes"] = list(args.node)
        if args.task:
            graph["tasks"] = list(args.task)
        graphs.append(graph)
    spec: dict[str, Any] = {"environment": args.env, "graphs": graphs}
    for flag, field in (("dry_run", "dryRun"), ("noop", "noop"), ("force", "force")):
        if getattr(args, flag):
            spec[field] = True
    if args.subgraph:
        spec["subgraphs"] = list(args.subgraph)
    return spec


async def create_run(kube: Requester, args: argparse.Namespace, spec: Mapping[str, Any], name: str | None,
                      stem: str) -> str:
    """Create the GraphRun of `spec` after the checks a run would fail (nodes not in the environment, types it
    has no graph of), named `name` or generated from the environment and `stem`; its name."""
    env = await environment(kube, args.namespace, args.env)
    known = [str(n.get("name")) for n in (env.get("spec") or {}).get("nodes") or []]
    unknown = [n for n in args.node if n not in known]
    if unknown:
        raise CommandError(f"--node {', '.join(unknown)}: not in environment {args.env} (its nodes: "
                           f"{', '.join(known) or 'none'}); nothing run")
    ranged = [n for sub in args.subgraph for n in (*sub.get("startNodes", ()), *sub.get("endNodes", ()))
              if n not in known]
    if ranged:
        raise CommandError(f"--subgraph: {', '.join(dict.fromkeys(ranged))} not in environment {args.env} (its "
                           f"nodes: {', '.join(known) or 'none'}); nothing run")
    await known_types(kube, args, env)
    metadata: dict[str, Any] = {"namespace": args.namespace}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = re.sub(r"[^a-z0-9-]", "-", f"{args.env}-{stem}")[:50].strip("-") + "-"
    body = {"apiVersion": API_VERSION, "kind": "GraphRun", "metadata": metadata, "spec": dict(spec)}
    made = await kube.request("POST", object_path(RUNS, args.namespace), body)
    return str(made["metadata"]["name"])


async def execute(kube: Requester, args: argparse.Namespace) -> int:
    types = "-".join(args.type).lower().replace("_", "-")
    args.run = await create_run(kube, args, run_spec(args), args.name, types)
    if not args.follow:
        print(args.run)
        return 0
    print(f"graphrun/{args.run} created", file=sys.stderr)
    return await status(kube, args)


async def known_types(kube: Requester, args: argparse.Namespace, env: Mapping[str, Any]) -> None:
    """A CommandError for a --type the environment has no graph of, naming those it has (a run of it would
    plan nothing and succeed)."""
    try:
        types = environment_graph_types(await graph_items(kube, args.namespace), args.env, env)
    except ValidationError:
        raise CommandError(f"environment {args.env} has an invalid spec (see its status)") from None
    for graph_type in args.type:
        problem = no_such_type(args.env, graph_type, types)
        if problem:
            raise CommandError(f"--type {graph_type}: {problem}; nothing run")


PLAN_INTERVAL = 0.2
PLAN_SECONDS = 120.0
"""How often `plan` looks at its dry run, and how long it waits for the operator to plan it."""


async def plan(kube: Requester, args: argparse.Namespace) -> int:
    """The plan a run of these types would follow, made by the operator's own planner (a dry-run GraphRun: the
    nodes' configuration and the last run's data as a run sees them), printed and the dry run deleted."""
    spec = {**run_spec(args), "dryRun": True}
    spec.pop("noop", None)
    name = await create_run(kube, args, spec, None, "plan")
    path = object_path(RUNS, args.namespace, name)
    deadline = time.monotonic() + PLAN_SECONDS
    obj = await kube.request("GET", path)
    while not final(obj):
        if time.monotonic() > deadline:
            raise CommandError(f"graphrun/{name} was not planned within {PLAN_SECONDS:g}s (is the operator running?); "
                               "it is left for you to look at")
        await pause(getattr(args, "interval", PLAN_INTERVAL))
        obj = await kube.request("GET", path)
    try:
        await kube.request("DELETE", path)
    except ApiError as error:
        print(f"{COMMAND}: graphrun/{name} (the dry run) could not be deleted: {error}", file=sys.stderr)
    if args.output:
        status = obj.get("status") or {}
        print(dump({k: status.get(k) for k in ("state", "reason", "plan", "nodes", "omitted")}, args.output))
    else:
        print(format_plan(obj))
    return exit_code(obj)
