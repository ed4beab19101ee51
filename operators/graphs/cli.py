"""`stead graph`: deployment graphs and their runs through the API server, as `fuel2 graph` does it for Fuel
(DeploymentGraph and GraphRun objects, as `kubectl` would write them; docs/graphs.md, "The CLI").

    stead graph upload (--env|--release|--plugin) NAME [--type T] (--file F | --dir D) [--name VERBOSE]
                           Fuel task files as published; creates the graph of that owner and type, or
                           replaces the tasks of the one there is
    stead graph download --env E [--type T] [--all | --release | --plugins | --env-only] [--file F]
                           the merged graph (--all, the default) or one level, as a Fuel task file
    stead graph list [--env E]           name, type, owner, tasks (with --env: the graphs its merge takes)
    stead graph delete (--env|--release|--plugin) NAME [--type T]
    stead graph execute --env E --type T... [--node N...] [--task T...] [--subgraph START[:END]...]
                        [--force] [--dry-run | --noop] [-f] [--name NAME]
                           a GraphRun; -f follows it (a live tree of each node's tasks and the
                           progress) until it ends: exit code 0 when it succeeded, 1 otherwise
    stead graph plan --env E [--type T...] [--node N...] [--task T...] [--subgraph START[:END]...] [--force]
                           the plan a run would follow (the operator plans a dry run, which is then deleted):
                           each node's tasks in the order they run, and the dependencies on nodes outside
                           the subset
    stead graph status RUN [-o json|yaml]   the run's tree of nodes and tasks
    stead graph logs RUN [--node N] [--task T] [--type T]
                           the whole output of the run's task instances (the status keeps a failure's
                           tail only), from the operator's API (as `stead config`: --server, --token)
    stead graph history --env E [--node N] [--task T] [--type T] [--state S] [--run R] [--limit N]
                        [--continue TOKEN | --all] [-o table|json|yaml|csv]
                           the task instances of the environment's runs, newest first, from the
                           operator's API

Every action takes `-n NAMESPACE` and `--kubeconfig`. A refusal (the admission webhook's 409 or 422, a
404) is one line on stderr and exit code 1.

Only the standard library is imported at start-up: the models, yaml, the Kubernetes client and rich are
imported by the command that uses them (rich only to draw on a terminal).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators import API_VERSION
from operators.graphs.objects import GRAPHS
from operators.graphs.views import format_graphs, format_history, format_plan, format_run, render_run
from operators.runtime import CommandError, cluster_arguments, dump, pause, refusals_as_lines, run_to_end, with_cluster

if TYPE_CHECKING:
    from rich.console import Console

    from operators.runtime import Requester

COMMAND = "stead graph"
RUNS = "graphruns"
ENVIRONMENTS = "environments"
"""The kinds' plurals in API paths, as the models declare them (a test checks that they agree)."""
FINAL = ("Succeeded", "Failed", "Aborted")
OWNER_FLAGS = {"env": "environment", "release": "release", "plugin": "plugin"}
LEVELS = {"all": "all", "release": "release", "plugins": "plugins", "env_only": "environment"}


def _path(plural: str, namespace: str, name: str | None = None) -> str:
    from operators.runtime import custom_path

    return custom_path(plural, namespace, name)


def _owner(args: argparse.Namespace) -> tuple[str, str]:
    return next((kind, getattr(args, flag)) for flag, kind in OWNER_FLAGS.items() if getattr(args, flag, None))


async def _environment(kube: Requester, namespace: str, name: str) -> dict[str, Any]:
    """The Environment object, or a CommandError naming the environments there."""
    from operators.runtime import ApiError

    try:
        return await kube.request("GET", _path(ENVIRONMENTS, namespace, name))
    except ApiError as error:
        if error.status != 404:
            raise
    listed = await kube.request("GET", _path(ENVIRONMENTS, namespace))
    names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])
    raise CommandError(f"no environment {name!r} in namespace {namespace} (environments here: "
                       f"{', '.join(names) or 'none'})")


# --- the actions ------------------------------------------------------------------------------------


def _load(args: argparse.Namespace) -> list[Any]:
    from operators.graphs.fuel import FuelFormatError, load_dir, load_file
    from operators.graphs.models import check_tasks

    try:
        if args.file is not None:
            if not args.file.is_file():
                raise CommandError(f"--file {args.file}: no such file")
            tasks = load_file(args.file)
        else:
            if not args.dir.is_dir():
                raise CommandError(f"--dir {args.dir}: no such directory")
            tasks = load_dir(args.dir)
    except FuelFormatError as error:
        raise CommandError(str(error)) from None
    # the checks the admission webhook makes (duplicate ids, regexes, conditions), said before anything is written
    problems = check_tasks(tasks, str(args.file or args.dir))
    if problems:
        raise CommandError("; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))
    return tasks


async def _upload(kube: Requester, args: argparse.Namespace) -> int:
    from operators.graphs.api import save_graph

    kind, owner = _owner(args)
    tasks = _load(args)
    if kind == "environment":
        await _environment(kube, args.namespace, owner)
    obj, created = await save_graph(kube, args.namespace, kind, owner, args.type, tasks, args.name)
    print(f"deploymentgraph/{obj['metadata']['name']} {'created' if created else 'updated'}: the {args.type!r} "
          f"graph of {kind} {owner}, {len(tasks)} tasks")
    return 0


async def _download(kube: Requester, args: argparse.Namespace) -> int:
    from operators.graphs.api import levels_of
    from operators.graphs.fuel import dump_tasks

    env = await _environment(kube, args.namespace, args.env)
    level = next((LEVELS[name] for name in ("release", "plugins", "env_only") if getattr(args, name)), "all")
    try:
        merged = (await levels_of(kube, args.namespace, args.env, args.type, env)).merged(level)
    except ValueError as error:  # MergeError, an invalid graph
        raise CommandError(str(error)) from None
    text = dump_tasks(merged.tasks) if merged.tasks else "[]\n"
    what = "merged" if level == "all" else f"{level} level of the"
    if args.file is None:
        sys.stdout.write(text)
    else:
        args.file.write_text(text)
        print(f"wrote the {what} {args.type!r} graph of environment {args.env} ({len(merged.tasks)} tasks) to "
              f"{args.file}", file=sys.stderr)
    return 0


async def _list(kube: Requester, args: argparse.Namespace) -> int:
    from operators.graphs.objects import graph_items, owner_of

    items = await graph_items(kube, args.namespace)
    if args.env:
        env = await _environment(kube, args.namespace, args.env)
        spec = env.get("spec") or {}
        owners = {("environment", args.env), ("release", str(spec.get("release"))),
                  *(("plugin", str(p)) for p in spec.get("plugins") or [])}
        items = [i for i in items if owner_of(i) in owners]
    if args.output:
        print(dump(items, args.output))
    elif items:
        print(format_graphs(items))
    else:
        where = f" for environment {args.env}" if args.env else ""
        print(f"no deployment graphs{where} in namespace {args.namespace}", file=sys.stderr)
    return 0


async def _delete(kube: Requester, args: argparse.Namespace) -> int:
    from operators.graphs.objects import find_graph, graph_items, owner_of, type_of

    kind, owner = _owner(args)
    items = await graph_items(kube, args.namespace)
    found = find_graph(items, kind, owner, args.type)
    if found is None:
        types = sorted(type_of(i) for i in items if owner_of(i) == (kind, owner))
        raise CommandError(f"{kind} {owner} has no {args.type!r} graph in namespace {args.namespace} (its graph "
                           f"types: {', '.join(types) or 'none'})")
    name = found["metadata"]["name"]
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": found["metadata"]["uid"]}}
    await kube.request("DELETE", _path(GRAPHS, args.namespace, name), options)
    print(f"deploymentgraph/{name} deleted (the {args.type!r} graph of {kind} {owner})")
    return 0


def subgraph(text: str) -> dict[str, list[str]]:
    """`START[:END]`, each a comma-separated list of task ids or /regex/, optionally on nodes (Fuel's
    `netconfig/node-1,node-2:hiera/node-3`; `:END` alone: everything up to END)."""
    from operators.graphs.ranges import subgraph_range

    try:
        return subgraph_range(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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


async def _create_run(kube: Requester, args: argparse.Namespace, spec: Mapping[str, Any], name: str | None,
                      stem: str) -> str:
    """Create the GraphRun of `spec` after the checks a run would fail (nodes not in the environment, types it
    has no graph of), named `name` or generated from the environment and `stem`; its name."""
    import re

    env = await _environment(kube, args.namespace, args.env)
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
    await _known_types(kube, args, env)
    metadata: dict[str, Any] = {"namespace": args.namespace}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = re.sub(r"[^a-z0-9-]", "-", f"{args.env}-{stem}")[:50].strip("-") + "-"
    body = {"apiVersion": API_VERSION, "kind": "GraphRun", "metadata": metadata, "spec": dict(spec)}
    made = await kube.request("POST", _path(RUNS, args.namespace), body)
    return str(made["metadata"]["name"])


async def _execute(kube: Requester, args: argparse.Namespace) -> int:
    types = "-".join(args.type).lower().replace("_", "-")
    args.run = await _create_run(kube, args, run_spec(args), args.name, types)
    if not args.follow:
        print(args.run)
        return 0
    print(f"graphrun/{args.run} created", file=sys.stderr)
    return await _status(kube, args)


async def _known_types(kube: Requester, args: argparse.Namespace, env: Mapping[str, Any]) -> None:
    """A CommandError for a --type the environment has no graph of, naming those it has (a run of it would
    plan nothing and succeed)."""
    from pydantic import ValidationError

    from operators.graphs.api import environment_graph_types
    from operators.graphs.kept import no_such_type
    from operators.graphs.objects import graph_items

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


async def _plan(kube: Requester, args: argparse.Namespace) -> int:
    """The plan a run of these types would follow, made by the operator's own planner (a dry-run GraphRun: the
    nodes' configuration and the last run's data as a run sees them), printed and the dry run deleted."""
    import time

    from operators.runtime import ApiError

    spec = {**run_spec(args), "dryRun": True}
    spec.pop("noop", None)
    name = await _create_run(kube, args, spec, None, "plan")
    path = _path(RUNS, args.namespace, name)
    deadline = time.monotonic() + PLAN_SECONDS
    obj = await kube.request("GET", path)
    while not _final(obj):
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
    return _exit_code(obj)


def _exit_code(obj: Mapping[str, Any]) -> int:
    return 0 if (obj.get("status") or {}).get("state") in (None, "Pending", "Planning", "Running", "Succeeded") else 1


def _final(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("state") in FINAL


async def _status(kube: Requester, args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the run (plain text, a rich tree on a terminal, or -o json|yaml); -f: until it ends, then the
    exit code says whether it succeeded."""

    path = _path(RUNS, args.namespace, args.run)
    follow, output = getattr(args, "follow", False), getattr(args, "output", None)
    interval = getattr(args, "interval", 1.0)
    obj = await _get_run(kube, args)
    if output:
        while follow and not _final(obj):
            await pause(interval)
            obj = await kube.request("GET", path)
        print(dump(obj.get("status") or {}, output))
        return _exit_code(obj)
    if console is not None or sys.stdout.isatty():
        return await _status_rich(kube, path, obj, follow, interval, console)
    shown = ""
    while True:
        text = format_run(obj)
        if text != shown:
            print(text, flush=True)
            shown = text
        if not follow or _final(obj):
            return _exit_code(obj)
        await pause(interval)
        obj = await kube.request("GET", path)


async def _get_run(kube: Requester, args: argparse.Namespace) -> dict[str, Any]:
    from operators.runtime import ApiError

    try:
        return await kube.request("GET", _path(RUNS, args.namespace, args.run))
    except ApiError as error:
        if error.status != 404:
            raise
    listed = await kube.request("GET", _path(RUNS, args.namespace))
    names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])[-10:]
    raise CommandError(f"no graph run {args.run!r} in namespace {args.namespace} (runs here: "
                       f"{', '.join(names) or 'none'})")


async def _status_rich(kube: Requester, path: str, obj: dict[str, Any], follow: bool, interval: float,
                       console: Console | None) -> int:
    """The terminal view: printed once, or (-f) redrawn in place until the run ends."""

    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    if not follow:
        console.print(render_run(obj))
        return _exit_code(obj)
    with Live(render_run(obj), console=console, auto_refresh=False, transient=False) as live:
        while not _final(obj):
            await pause(interval)
            obj = await kube.request("GET", path)
            live.update(render_run(obj), refresh=True)
    return _exit_code(obj)


def _logs(args: argparse.Namespace) -> int:
    """Print the whole output of the run's instances that match --node/--task/--type, page by page from the
    operator's API (`GET /api/v1/graphruns/<run>/output/...`): one instance's output as it is; several, each
    after a `==> task@node (type) <==` line, as `tail` heads its files. Instances that printed nothing are left
    out. The output is masked as the runner stored it."""
    from urllib.parse import quote

    from operators.runtime import RequestFailed, UsageError, call

    base = f"{str(args.server).rstrip('/')}/api/v1/graphruns/{quote(args.run, safe='')}/output"
    filters = {k: v for k, v in (("node", args.node), ("task", args.task), ("type", args.type)) if v}
    try:
        listed = call(args, "GET", base + "/", filters)
        chosen = [i for i in listed.get("instances") or [] if i.get("bytes")]
        if not listed.get("instances"):
            what = " ".join(f"{k} {v}" for k, v in filters.items())
            raise RequestFailed(404, f"graph run {args.run} has no task instances{' for ' + what if what else ''}")
        headed = len(chosen) > 1 or not args.task
        for n, instance in enumerate(chosen):
            if headed:
                where = f"@{instance['node']}" if instance.get("node") else ""
                print(("\n" if n else "") + f"==> {instance['task']}{where} ({instance['type']}) <==", flush=True)
            query = {"type": str(instance["type"])}
            if instance.get("node"):
                query["node"] = str(instance["node"])
            offset: int | None = 0
            while offset is not None:
                page = call(args, "GET", f"{base}/{quote(str(instance['task']), safe='')}/",
                            {**query, "offset": str(offset)})
                sys.stdout.write(page["output"])
                offset = page.get("next_offset")
            sys.stdout.flush()
        if not chosen:
            print(f"{COMMAND}: no output stored for {len(listed['instances'])} task instances of run {args.run}",
                  file=sys.stderr)
    except (RequestFailed, UsageError) as error:
        print(f"{COMMAND}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    return 0


def _history(args: argparse.Namespace) -> int:
    """Print the environment's history from the operator's API (`GET /api/v1/clusters/<env>/history/`): a
    table, JSON or CSV, newest first; a page (`--limit`) at a time unless `--all`, the next page's
    `--continue` token on stderr."""
    from urllib.parse import quote

    from operators.graphs.history import HistoryEntry, to_csv
    from operators.runtime import RequestFailed, UsageError, call

    url = f"{str(args.server).rstrip('/')}/api/v1/clusters/{quote(args.env, safe='')}/history/"
    query = {k: str(v) for k, v in (("node", args.node), ("task", args.task), ("type", args.type),
                                    ("state", args.state), ("run", args.run), ("limit", args.limit)) if v}
    token = args.continue_token
    entries: list[dict[str, Any]] = []
    try:
        while True:
            page = call(args, "GET", url, {**query, **({"continue": token} if token else {})})
            entries.extend(page.get("entries") or [])
            token = page.get("continue")
            if not token or not args.all:
                break
    except (RequestFailed, UsageError) as error:
        print(f"{COMMAND}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    if args.output == "csv":
        sys.stdout.write(to_csv(HistoryEntry.from_json(e) for e in entries))
    elif args.output in ("json", "yaml"):
        print(dump({"entries": entries, "continue": token}, args.output))
    else:
        print(format_history(entries) if entries else f"no history for environment {args.env}"
              + (" with these filters" if query.keys() - {"limit"} else ""))
    if token:
        print(f"{COMMAND}: more entries: add --continue {token} (or --all)", file=sys.stderr)
    return 0


# --- running a command ------------------------------------------------------------------------------


async def dispatch(kube: Requester, args: argparse.Namespace) -> int:
    """Run the action with `kube`; a refusal (API errors, CommandError) is one line on stderr and exit code 1."""
    return await refusals_as_lines(COMMAND, args.handler(kube, args))


def _run_command(args: argparse.Namespace) -> int:
    return run_to_end(with_cluster(COMMAND, args.kubeconfig, lambda kube: args.handler(kube, args)))


# --- the parser -------------------------------------------------------------------------------------




def _owner_flags(parser: argparse.ArgumentParser) -> None:
    owner = parser.add_mutually_exclusive_group(required=True)
    owner.add_argument("-e", "--env", metavar="NAME", help="the graph of an Environment (Fuel's cluster)")
    owner.add_argument("-r", "--release", metavar="NAME", help="the graph of a release")
    owner.add_argument("-p", "--plugin", metavar="NAME", help="the graph of a plugin")
    parser.add_argument("-t", "--type", default="default", help="the graph type (default: default)")


def add_graph_actions(graph: argparse.ArgumentParser) -> None:
    """`stead graph upload|download|list|delete|execute|plan|status|logs|history`."""
    sub = graph.add_subparsers(metavar="ACTION")
    upload = sub.add_parser("upload", help="upload Fuel task files as the graph of an environment, release or "
                                           "plugin (creates it, or replaces the tasks of the one there is)")
    _owner_flags(upload)
    source = upload.add_mutually_exclusive_group(required=True)
    source.add_argument("-f", "--file", type=Path, help="a task file (a YAML list of tasks)")
    source.add_argument("-d", "--dir", type=Path, help="every *.yaml / *.yml under a directory, in path order")
    upload.add_argument("--name", help="the graph's verbose name")
    cluster_arguments(upload, _run_command)
    upload.set_defaults(handler=_upload)

    download = sub.add_parser("download", help="an environment's graph as a Fuel task file: merged (release < "
                                               "plugins < environment) or one level")
    download.add_argument("-e", "--env", required=True, metavar="NAME")
    download.add_argument("-t", "--type", default="default", help="the graph type (default: default)")
    level = download.add_mutually_exclusive_group()
    level.add_argument("-a", "--all", action="store_true", help="the merged graph (the default)")
    level.add_argument("-r", "--release", action="store_true", help="the release's graph only")
    level.add_argument("-p", "--plugins", action="store_true", help="the enabled plugins' graphs only (merged)")
    level.add_argument("-c", "--env-only", action="store_true", help="the environment's own graph only")
    download.add_argument("-f", "--file", type=Path, help="write here (default: standard output)")
    cluster_arguments(download, _run_command)
    download.set_defaults(handler=_download)

    listing = sub.add_parser("list", help="the deployment graphs: name, type, owner, tasks")
    listing.add_argument("-e", "--env", metavar="NAME", help="only the graphs the environment's merge takes")
    cluster_arguments(listing, _run_command, output=True)
    listing.set_defaults(handler=_list)

    delete = sub.add_parser("delete", help="delete the graph of an environment, release or plugin")
    _owner_flags(delete)
    cluster_arguments(delete, _run_command)
    delete.set_defaults(handler=_delete)

    execute = sub.add_parser("execute", help="run graph types on an environment (a GraphRun)")
    execute.add_argument("-e", "--env", required=True, metavar="NAME")
    execute.add_argument("-t", "--type", nargs="+", default=["default"], metavar="TYPE",
                         help="the graph types to run, in order (default: default)")
    execute.add_argument("-N", "--node", nargs="+", default=[], metavar="NODE", help="only these nodes")
    execute.add_argument("-T", "--task", nargs="+", default=[], metavar="TASK",
                         help="only these tasks (the others are skipped)")
    execute.add_argument("-S", "--subgraph", nargs="+", default=[], type=subgraph, metavar="START[:END]",
                         help="only what lies forward of START and backward of END (comma-separated task ids "
                              "or /regex/, each side optionally on nodes: netconfig/node-1,node-2:hiera/node-3)")
    execute.add_argument("--force", action="store_true", help="every condition's data counts as changed")
    mode = execute.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="plan only: nothing runs on any node")
    mode.add_argument("--noop", action="store_true", help="puppet with --noop, shell tasks not at all")
    execute.add_argument("-f", "--follow", action="store_true",
                         help="follow the run until it ends (exit code 0 when it succeeded, 1 otherwise)")
    execute.add_argument("--name", help="the GraphRun's name (default: generated from the environment and types)")
    cluster_arguments(execute, _run_command)
    execute.set_defaults(handler=_execute)

    plan = sub.add_parser("plan", help="the plan a run of graph types would follow: each node's tasks in the order "
                                       "they run, and the dependencies on nodes outside the subset (a dry run)")
    plan.add_argument("-e", "--env", required=True, metavar="NAME")
    plan.add_argument("-t", "--type", nargs="+", default=["default"], metavar="TYPE",
                      help="the graph types, in order (default: default)")
    plan.add_argument("-N", "--node", nargs="+", default=[], metavar="NODE", help="only these nodes")
    plan.add_argument("-T", "--task", nargs="+", default=[], metavar="TASK", help="only these tasks")
    plan.add_argument("-S", "--subgraph", nargs="+", default=[], type=subgraph, metavar="START[:END]",
                      help="only what lies forward of START and backward of END")
    plan.add_argument("--force", action="store_true", help="every condition's data counts as changed")
    cluster_arguments(plan, _run_command, output=True)
    plan.set_defaults(handler=_plan, dry_run=False, noop=False)

    status = sub.add_parser("status", help="a run: each node's tasks with their state, and the progress")
    status.add_argument("run", metavar="RUN")
    status.add_argument("-f", "--follow", action="store_true", help="until the run ends")
    cluster_arguments(status, _run_command, output=True)
    status.set_defaults(handler=_status)

    logs = sub.add_parser("logs", help="the whole output of a run's task instances (the status keeps a failure's "
                                       "tail only), from the operator's API")
    logs.add_argument("run", metavar="RUN")
    logs.add_argument("-N", "--node", help="only the instances on this node")
    logs.add_argument("-T", "--task", help="only this task's instances")
    logs.add_argument("-t", "--type", help="only this graph type's instances")
    logs.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    from operators.runtime import api_arguments

    api_arguments(logs)
    logs.set_defaults(func=_logs)

    history = sub.add_parser("history", help="the task instances of an environment's runs, newest first: state, "
                                             "duration, attempts, the run (and what noop runs found would change)")
    history.add_argument("-e", "--env", required=True, metavar="NAME")
    history.add_argument("-N", "--node", help="only this node's instances")
    history.add_argument("-T", "--task", help="only this task's instances")
    history.add_argument("-t", "--type", help="only this graph type's instances")
    history.add_argument("--state", choices=("success", "failure", "aborted"), help="only instances that ended so")
    history.add_argument("--run", help="only this GraphRun's instances")
    history.add_argument("--limit", type=int, default=50, help="entries per page (default 50, at most 1000)")
    history.add_argument("--continue", dest="continue_token", metavar="TOKEN",
                         help="the page after the one that printed this token")
    history.add_argument("--all", action="store_true", help="every page")
    history.add_argument("-o", "--output", choices=("table", "json", "yaml", "csv"), default="table")
    history.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    api_arguments(history)
    history.set_defaults(func=_history)


__all__ = ["add_graph_actions", "dispatch", "format_graphs", "format_history", "format_plan", "format_run",
           "render_run", "run_spec",
           "subgraph"]
