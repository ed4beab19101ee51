"""`stead app`, `stead actionrun` and `stead blueprint`: launch apps, run actions, follow runs, show a
blueprint's dependencies (all through the API server).

    stead app launch NAME --blueprint BP [--input k=v ...] [-n NS]
    stead app run APP ACTION [--arg k=v ...] [-n NS] [-f]
    stead actionrun logs RUN [-n NS] [-f] [-o json|yaml] [--tail N]
                                         the run log tree with per-task output; -f follows it live
                                         (on a terminal: a live table; otherwise plain text), -o prints
                                         the ActionRun's status instead (with -f: the final one)
    stead actionrun abort RUN [-n NS]
    stead blueprint deps NAME [-n NS] [-o json|yaml]
                                         the dependencies of its system actions, one line each

The output shown is what the ActionRun's status holds: already masked, secrets never appear.

This module is the parsers, and what formats a run and a blueprint's dependencies; each action is run from
`cli_runs`, named ("module:function") and imported only when it runs (`operators.runtime.cli.nouns`, the
CLI's one lazy point), and the terminal view (rich) from `cli_terminal`, only on a terminal. Parsing imports
the standard library only, so that `stead --help` and argument errors are instant.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from operators.calm.names import ACTIONRUN_ACTIONS
from operators.runtime import command as lazy
from operators.runtime import dump, run_to_end, with_cluster

PLURALS = {"App": "apps", "ActionRun": "actionruns", "Blueprint": "blueprints"}
"""The kinds' plurals in API paths, as `operators.calm.models` declares them (a test checks that they
agree): importing the models, ~0.13 s, only to build a path is what these commands must not pay."""

FINAL = ("Succeeded", "Failed", "Aborted")


def progress_bar(done: int, total: int, width: int = 20) -> str:
    filled = 0 if total <= 0 else max(0, min(width, done * width // total))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def format_run(obj: Mapping[str, Any], outputs: bool = True) -> str:
    """The run log tree of an ActionRun, as `stead actionrun logs` prints it."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    progress = status.get("progress") or {}
    lines = [f"run {obj['metadata']['name']}  app {spec.get('app')}  action {spec.get('action')}  "
             f"{status.get('state') or 'Pending'}  {progress_bar(progress.get('done', 0), progress.get('total', 0))}"]
    for task in status.get("runLog") or []:
        if task.get("type") == "noop" and not any(r.get("message") for r in task.get("replicas") or []):
            lines.append(f"{task['task']}  {task['state']}")
            continue
        lines.append(f"{task['task']}  ({task['type']})  {task['state']}")
        for inst in task.get("replicas") or []:
            where = inst.get("target") or "runner"
            extra = f"  exit {inst['exitCode']}" if inst.get("exitCode") is not None else ""
            message = f"  {inst['message']}" if inst.get("message") else ""
            lines.append(f"  {where}  {inst['state']}  attempts {inst.get('attempts', 0)}{extra}{message}")
            if outputs:
                lines.extend(f"    | {line}" for line in str(inst.get("output") or "").splitlines())
    if status.get("reason"):
        lines.append(f"reason: {status.get('failedTask') or ''} {status['reason']}".replace("  ", " "))
    return "\n".join(lines)


def run_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ActionRun's status as `stead actionrun logs -o json|yaml` prints it: state, progress and runLog
    always there."""
    status = dict(obj.get("status") or {})
    progress = status.get("progress") or {}
    return {**status, "state": status.get("state") or "Pending",
            "progress": {"done": int(progress.get("done", 0)), "total": int(progress.get("total", 0))},
            "runLog": list(status.get("runLog") or [])}


def run_exit_code(obj: Mapping[str, Any]) -> int:
    """`stead actionrun logs`' exit code: 1 once the run failed or was aborted."""
    return 0 if (obj.get("status") or {}).get("state") in (None, "Pending", "Running", "Succeeded") else 1


def run_final(obj: Mapping[str, Any]) -> bool:
    """Whether the run has ended (what `-f` follows it until)."""
    return (obj.get("status") or {}).get("state") in FINAL


def dump_status(obj: Mapping[str, Any], fmt: str) -> str:
    """One JSON or YAML document of the run's status."""
    return dump(run_status(obj), fmt)




def duration(seconds: float) -> str:
    """A short duration: 0.4s, 12s, 1m05s, 2h03m."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _run_command(args: argparse.Namespace) -> int:
    return run_to_end(_call(args))


async def _call(args: argparse.Namespace) -> int:
    """Run the command's handler with a client of the cluster; API errors, an unreachable API server and
    an unusable kubeconfig are one line on stderr and exit code 1 (never a traceback)."""
    return await with_cluster("stead", args.kubeconfig, lambda kube: args.handler(kube, args))


# --- stead blueprint deps --------------------------------------------------------------------------

def _entity(kind: Any, name: Any) -> str:
    return f"{kind}/{name}" if kind else str(name)


def dependency_why(entry: Mapping[str, Any]) -> str:
    """Where one dependency comes from: the spec field; for an implicit one, also the action, the task
    that reads the attribute and the task that sets it."""
    source = str(entry.get("source") or "")
    if entry.get("type") != "implicit":
        return source
    action = entry.get("actionName") or "?"
    if entry.get("actionResourceName"):
        action = f"{entry['actionResourceName']}.{action}"
    reads = f"{entry.get('getterTask') or entry.get('getterResourceName')} reads {entry.get('setterResourceAttr')}"
    sets = f"which {entry.get('setterTask') or entry.get('setterResourceName')} sets"
    return f"{action}: {reads}, {sets}" + (f" ({source})" if source else "")


def format_deps(obj: Mapping[str, Any]) -> str:
    """A Blueprint's `status.dependencyList` as `stead blueprint deps` prints it: a header, then one line
    per dependency, `DEPENDENT -> DEPENDS ON  TYPE  WHY` in columns, in the list's order (the compiler's:
    inherent, explicit from dependsOn, then implicit, where a task reads an attribute a task of another
    entity sets)."""
    status = obj.get("status") or {}
    entries = list(status.get("dependencyList") or [])
    name = (obj.get("metadata") or {}).get("name", "?")
    state = status.get("state") or status.get("phase") or "not compiled yet"
    counted = f"{len(entries)} {'dependency' if len(entries) == 1 else 'dependencies'}"
    lines = [f"blueprint/{name}  {state}  {counted}"]
    if not entries:
        return "\n".join([*lines, *(f"error: {e}" for e in status.get("errors") or [])])
    lines.append("(A -> B: A depends on B; create, start and restart run B's tasks first, stop and delete A's)")
    rows = [(_entity(e.get("getterResourceKind"), e.get("getterResourceName")),
             _entity(e.get("setterResourceKind"), e.get("setterResourceName")),
             str(e.get("type") or ""), dependency_why(e)) for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines += [f"{a:<{widths[0]}}  -> {b:<{widths[1]}}  {kind:<{widths[2]}}  {why}".rstrip()
              for a, b, kind, why in rows]
    lines += [f"error: {e}" for e in status.get("errors") or []]
    return "\n".join(lines)


def dump_deps(obj: Mapping[str, Any], fmt: str) -> str:
    """The dependency list as one JSON or YAML document (a list, as the status holds it)."""
    return dump(list((obj.get("status") or {}).get("dependencyList") or []), fmt)


# --- the parsers -----------------------------------------------------------------------------------


def _lines(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--kubeconfig", type=Path)
    parser.set_defaults(func=_run_command)


def add_app_actions(app: argparse.ArgumentParser) -> None:
    """`stead app launch|run`."""
    asub = app.add_subparsers(metavar="ACTION")
    launch = asub.add_parser("launch", help="create an App from an Active Blueprint")
    launch.add_argument("name")
    launch.add_argument("--blueprint", required=True)
    launch.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    _common(launch)
    launch.set_defaults(handler=lazy("operators.calm.cli_runs:launch_app"))
    run = asub.add_parser("run", help="run an action of an app (an ActionRun)")
    run.add_argument("app")
    run.add_argument("action")
    run.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("-f", "--follow", action="store_true")
    run.add_argument("--tail", type=_lines, metavar="N", help="on a terminal: the last N output lines per replica")
    _common(run)
    run.set_defaults(handler=lazy("operators.calm.cli_runs:run_action"))


def add_actionrun_actions(runs: argparse.ArgumentParser) -> None:
    """`stead actionrun logs|abort`."""
    rsub = runs.add_subparsers(metavar="ACTION")
    logs = rsub.add_parser("logs", help="the run log tree with per-task output")
    logs.add_argument("run")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("-o", "--output", choices=["json", "yaml"],
                      help="print the ActionRun's status (state, progress, runLog); with -f only the final one")
    logs.add_argument("--tail", type=_lines, metavar="N",
                      help="on a terminal: the last N output lines per replica (default: all; with -f: none)")
    _common(logs)
    logs.set_defaults(handler=lazy("operators.calm.cli_runs:logs"))
    abort = rsub.add_parser("abort", help="abort a run")
    abort.add_argument("run")
    _common(abort)
    abort.set_defaults(handler=lazy("operators.calm.cli_runs:abort"))


def add_blueprint_actions(blueprint: argparse.ArgumentParser) -> None:
    """`stead blueprint deps`."""
    bsub = blueprint.add_subparsers(metavar="ACTION")
    deps = bsub.add_parser("deps", help="the dependencies of its system actions (status.dependencyList), one "
                           "line each: inherent, explicit (dependsOn), implicit (an attribute a task reads)")
    deps.add_argument("name")
    deps.add_argument("-o", "--output", choices=["json", "yaml"], help="print status.dependencyList as it is")
    _common(deps)
    deps.set_defaults(handler=lazy("operators.calm.cli_runs:deps"))


__all__ = [
    "ACTIONRUN_ACTIONS",
    "add_actionrun_actions",
    "add_app_actions",
    "add_blueprint_actions",
    "dump_deps",
    "dump_status",
    "format_deps",
    "format_run",
    "run_exit_code",
    "run_final",
]
