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

This module is the parser; each action is run from its own module, named ("module:function") and imported
only when it runs (`operators.runtime.cli.nouns`, the CLI's one lazy point): `cli_objects` (list, delete),
`cli_upload` (upload, download: the models, yaml), `cli_runs` (execute, plan), `cli_status` (status), whose
view on a terminal is `cli_terminal`'s (rich), `cli_output` (logs, history: the operator's API). Parsing
imports the standard library only.
"""


from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from operators.graphs.objects import GRAPHS
from operators.graphs.ranges import subgraph_range
from operators.runtime import (
    api_arguments,
    cluster_arguments,
    refusals_as_lines,
    run_to_end,
    with_cluster,
)
from operators.runtime import command as lazy

if TYPE_CHECKING:
    from operators.runtime import Requester

COMMAND = "stead graph"
RUNS = "graphruns"
ENVIRONMENTS = "environments"
"""The kinds' plurals in API paths, as the models declare them (a test checks that they agree)."""
FINAL = ("Succeeded", "Failed", "Aborted")
OWNER_FLAGS = {"env": "environment", "release": "release", "plugin": "plugin"}
LEVELS = {"all": "all", "release": "release", "plugins": "plugins", "env_only": "environment"}


def subgraph(text: str) -> dict[str, list[str]]:
    """`START[:END]`, each a comma-separated list of task ids or /regex/, optionally on nodes (Fuel's
    `netconfig/node-1,node-2:hiera/node-3`; `:END` alone: everything up to END)."""
    try:
        return subgraph_range(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
    upload.set_defaults(handler=lazy("operators.graphs.cli_upload:upload"))

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
    download.set_defaults(handler=lazy("operators.graphs.cli_upload:download"))

    listing = sub.add_parser("list", help="the deployment graphs: name, type, owner, tasks")
    listing.add_argument("-e", "--env", metavar="NAME", help="only the graphs the environment's merge takes")
    cluster_arguments(listing, _run_command, output=True)
    listing.set_defaults(handler=lazy("operators.graphs.cli_objects:list_graphs"))

    delete = sub.add_parser("delete", help="delete the graph of an environment, release or plugin")
    _owner_flags(delete)
    cluster_arguments(delete, _run_command)
    delete.set_defaults(handler=lazy("operators.graphs.cli_objects:delete"))

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
    execute.set_defaults(handler=lazy("operators.graphs.cli_runs:execute"))

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
    plan.set_defaults(handler=lazy("operators.graphs.cli_runs:plan"), dry_run=False, noop=False)

    status = sub.add_parser("status", help="a run: each node's tasks with their state, and the progress")
    status.add_argument("run", metavar="RUN")
    status.add_argument("-f", "--follow", action="store_true", help="until the run ends")
    cluster_arguments(status, _run_command, output=True)
    status.set_defaults(handler=lazy("operators.graphs.cli_status:status"))

    logs = sub.add_parser("logs", help="the whole output of a run's task instances (the status keeps a failure's "
                                       "tail only), from the operator's API")
    logs.add_argument("run", metavar="RUN")
    logs.add_argument("-N", "--node", help="only the instances on this node")
    logs.add_argument("-T", "--task", help="only this task's instances")
    logs.add_argument("-t", "--type", help="only this graph type's instances")
    logs.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    api_arguments(logs)
    logs.set_defaults(func=lazy("operators.graphs.cli_output:logs"))

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
    history.set_defaults(func=lazy("operators.graphs.cli_output:history"))


__all__ = ["GRAPHS", "add_graph_actions", "dispatch", "subgraph"]
