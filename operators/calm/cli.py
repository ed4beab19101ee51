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

Only the standard library is imported here at start-up: the models, the Kubernetes client and rich
are imported by the command that uses them, so that `stead --help` and argument errors are instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators import API_VERSION
from operators.calm.names import ACTIONRUN_ACTIONS
from operators.runtime import dump, pairs, parse_instant, pause, run_to_end, with_cluster

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from operators.runtime import Requester

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


def dump_status(obj: Mapping[str, Any], fmt: str) -> str:
    """One JSON or YAML document of the run's status."""
    return dump(run_status(obj), fmt)




def _span(items: Sequence[Mapping[str, Any]], now: datetime, start: str = "startedAt",
          end: str = "finishedAt") -> str:
    """How long the items took: first start to last finish, or to now while one of them has not finished."""
    starts = [t for t in (parse_instant(i.get(start)) for i in items) if t]
    if not starts:
        return ""
    ends = [parse_instant(i.get(end)) for i in items]
    finish = now if any(e is None for e in ends) else max(e for e in ends if e)
    return duration((finish - min(starts)).total_seconds())


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


STYLES = {"pending": ("◷", "dim"), "running": ("●", "bold yellow"), "success": ("✔", "green"),
          "failure": ("✖", "bold red"), "aborted": ("⊘", "magenta"), "skipped": ("○", "dim"),
          "Pending": ("◷", "dim"), "Running": ("●", "bold yellow"), "Succeeded": ("✔", "bold green"),
          "Failed": ("✖", "bold red"), "Aborted": ("⊘", "bold magenta")}


def render_run(obj: Mapping[str, Any], tail: int | None = 0, now: datetime | None = None) -> RenderableType:
    """The run log tree of an ActionRun for a terminal (what `stead actionrun logs -f` shows live, like `argo watch`):
    each task and its replicas with state, attempts, exit code, duration and message, the last `tail` lines of
    each replica's output (None: all of them), and a progress bar of the task instances done."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    now = now or datetime.now(UTC)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    state = str(status.get("state") or "Pending")
    progress = status.get("progress") or {}
    done, total = int(progress.get("done", 0)), int(progress.get("total", 0))

    def mark(value: str) -> Text:
        glyph, style = STYLES.get(value, ("?", ""))
        return Text(f"{glyph} {value}", style=style)

    took = _span([status], now, "startTime", "endTime") if status.get("startTime") else ""
    header = Text.assemble(("run ", "dim"), (str(obj["metadata"]["name"]), "bold"), ("  app ", "dim"),
                           str(spec.get("app") or ""), ("  action ", "dim"), str(spec.get("action") or ""), "  ",
                           mark(state), (f"  {took}" if took else "", "cyan"))
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold dim", expand=False)
    table.add_column("TASK", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("ATTEMPTS", justify="right", no_wrap=True)
    table.add_column("EXIT", justify="right", no_wrap=True)
    table.add_column("DURATION", justify="right", no_wrap=True, style="cyan")
    table.add_column("MESSAGE", overflow="fold", ratio=1)
    tasks = status.get("runLog") or []
    for task in tasks:
        replicas = task.get("replicas") or []
        label = Text.assemble((str(task["task"]), "bold"), (f"  ({task.get('type')})", "dim"))
        table.add_row(label, mark(str(task.get("state"))), "", "", _span(replicas, now), "")
        if task.get("type") == "noop" and not any(r.get("message") for r in replicas):
            continue
        for n, inst in enumerate(replicas):
            last = n == len(replicas) - 1
            lines = str(inst.get("output") or "").splitlines()
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            exit_code = inst.get("exitCode")
            table.add_row(Text.assemble(("└─ " if last else "├─ ", "dim"), str(inst.get("target") or "runner")),
                          mark(str(inst.get("state"))), str(inst.get("attempts", 0)),
                          "" if exit_code is None else Text(str(exit_code), "red" if exit_code else "green"),
                          _span([inst], now), Text(str(inst.get("message") or ""), "red" if inst.get(
                              "state") == "failure" else ""))
            for line in lines:
                table.add_row(Text("   " if last else "│  ", "dim"), "", "", "", "",
                              Text(f"| {line}", style="dim", no_wrap=True, overflow="ellipsis"))
    colour = {"Succeeded": "green", "Failed": "red", "Aborted": "magenta"}.get(state, "yellow")
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(total, 1), completed=min(done, total) if total > 0 else 0, width=40,
                            complete_style=colour, finished_style=colour),
                Text(f"{done}/{total}", style="bold"),
                Text(f"{(100 * done // total) if total > 0 else 0}%", style="dim"))
    parts: list[RenderableType] = [header, table if tasks else Text("(no tasks yet)", style="dim"), bar]
    if status.get("reason"):
        reason = f"reason: {status.get('failedTask') or ''} {status['reason']}".replace("  ", " ")
        parts.append(Text(reason, style="red"))
    return Group(*parts)


def _run_command(args: argparse.Namespace) -> int:
    return run_to_end(_call(args))


async def _call(args: argparse.Namespace) -> int:
    """Run the command's handler with a client of the cluster; API errors, an unreachable API server and
    an unusable kubeconfig are one line on stderr and exit code 1 (never a traceback)."""
    return await with_cluster("stead", args.kubeconfig, lambda kube: args.handler(kube, args))


async def _launch(kube: Requester, args: argparse.Namespace) -> int:
    from operators.runtime import ApiError, custom_path

    try:  # an App of a blueprint that does not exist would only wait, Stalled: say so now
        await kube.request("GET", custom_path(PLURALS["Blueprint"], args.namespace, args.blueprint))
    except ApiError as error:
        if error.status != 404:
            raise
        listed = await kube.request("GET", custom_path(PLURALS["Blueprint"], args.namespace))
        names = sorted(str(item["metadata"]["name"]) for item in listed.get("items") or [])
        print(f"stead: no blueprint {args.blueprint!r} in namespace {args.namespace} (blueprints here: "
              f"{', '.join(names) or 'none'}); nothing launched", file=sys.stderr)
        return 1
    body = {"apiVersion": API_VERSION, "kind": "App", "metadata": {"name": args.name, "namespace": args.namespace},
            "spec": {"blueprint": args.blueprint, "inputs": pairs(args.input, "--input")}}
    await kube.request("POST", custom_path(PLURALS["App"], args.namespace), body)
    print(f"app/{args.name} launched (its create run: {args.name}-create)")
    return 0


async def _run_action(kube: Requester, args: argparse.Namespace) -> int:
    from operators.runtime import custom_path

    body = {"apiVersion": API_VERSION, "kind": "ActionRun",
            "metadata": {"generateName": f"{args.app}-{args.action}-"[:60].lower().replace("_", "-"),
                         "namespace": args.namespace},
            "spec": {"app": args.app, "action": args.action, "arguments": pairs(args.arg, "--arg")}}
    made = await kube.request("POST", custom_path(PLURALS["ActionRun"], args.namespace), body)
    args.run = made["metadata"]["name"]
    print(f"actionrun/{args.run} created")
    return await _logs(kube, args) if args.follow else 0


def _exit_code(obj: Mapping[str, Any]) -> int:
    return 0 if (obj.get("status") or {}).get("state") in (None, "Pending", "Running", "Succeeded") else 1


def _final(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("state") in FINAL


async def _logs(kube: Requester, args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the run (plain text, a rich view on a terminal, or -o json|yaml); -f: until it is final."""

    from operators.runtime import custom_path

    path = custom_path(PLURALS["ActionRun"], args.namespace, args.run)
    output, tail = getattr(args, "output", None), getattr(args, "tail", None)
    if output:
        obj = await kube.request("GET", path)
        while args.follow and not _final(obj):
            await pause(1.0)
            obj = await kube.request("GET", path)
        print(dump_status(obj, output))
        return _exit_code(obj)
    if console is not None or sys.stdout.isatty():
        return await _logs_rich(kube, args, path, tail, console)
    shown = ""
    while True:
        obj = await kube.request("GET", path)
        text = format_run(obj)
        if not args.follow:
            print(text)
            return _exit_code(obj)
        if text != shown:
            print(text, flush=True)
            shown = text
        if _final(obj):
            return _exit_code(obj)
        await pause(1.0)


async def _logs_rich(kube: Requester, args: argparse.Namespace, path: str, tail: int | None,
                     console: Console | None) -> int:
    """The terminal view: printed once, or (-f) redrawn in place every second until the run is final."""

    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    obj = await kube.request("GET", path)
    if not args.follow:
        console.print(render_run(obj, tail=tail))
        return _exit_code(obj)
    with Live(render_run(obj, tail=tail or 0), console=console, auto_refresh=False, transient=False) as live:
        while not _final(obj):
            await pause(1.0)
            obj = await kube.request("GET", path)
            live.update(render_run(obj, tail=tail or 0), refresh=True)
    return _exit_code(obj)


async def _abort(kube: Requester, args: argparse.Namespace) -> int:
    from operators.runtime import custom_path

    await kube.request("PATCH", custom_path(PLURALS["ActionRun"], args.namespace, args.run), {"spec": {"abort": True}},
                       content_type="application/merge-patch+json")
    print(f"actionrun/{args.run}: abort requested")
    return 0


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


async def _deps(kube: Requester, args: argparse.Namespace) -> int:
    from operators.runtime import custom_path

    obj = await kube.request("GET", custom_path(PLURALS["Blueprint"], args.namespace, args.name))
    print(dump_deps(obj, args.output) if args.output else format_deps(obj))
    return 1 if (obj.get("status") or {}).get("errors") else 0


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
    launch.set_defaults(handler=_launch)
    run = asub.add_parser("run", help="run an action of an app (an ActionRun)")
    run.add_argument("app")
    run.add_argument("action")
    run.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("-f", "--follow", action="store_true")
    run.add_argument("--tail", type=_lines, metavar="N", help="on a terminal: the last N output lines per replica")
    _common(run)
    run.set_defaults(handler=_run_action)


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
    logs.set_defaults(handler=_logs)
    abort = rsub.add_parser("abort", help="abort a run")
    abort.add_argument("run")
    _common(abort)
    abort.set_defaults(handler=_abort)


def add_blueprint_actions(blueprint: argparse.ArgumentParser) -> None:
    """`stead blueprint deps`."""
    bsub = blueprint.add_subparsers(metavar="ACTION")
    deps = bsub.add_parser("deps", help="the dependencies of its system actions (status.dependencyList), one "
                           "line each: inherent, explicit (dependsOn), implicit (an attribute a task reads)")
    deps.add_argument("name")
    deps.add_argument("-o", "--output", choices=["json", "yaml"], help="print status.dependencyList as it is")
    _common(deps)
    deps.set_defaults(handler=_deps)


__all__ = [
    "ACTIONRUN_ACTIONS",
    "add_actionrun_actions",
    "add_app_actions",
    "add_blueprint_actions",
    "dump_deps",
    "dump_status",
    "format_deps",
    "format_run",
    "render_run",
]
