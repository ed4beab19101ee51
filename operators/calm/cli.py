"""`stead app` and `stead run logs|abort`: launch apps, run actions, follow runs (all through the API server).

    stead app launch NAME --blueprint BP [--input k=v ...] [-n NS]
    stead app run APP ACTION [--arg k=v ...] [-n NS] [-f]
    stead run logs RUN [-n NS] [-f]      the run log tree with per-task output; -f follows it live
    stead run abort RUN [-n NS]

The output shown is what the ActionRun's status holds: already masked, secrets never appear.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from operators import API_VERSION
from operators.runtime.kube import ApiError, KubeClient, custom_path, load_access

FINAL = ("Succeeded", "Failed", "Aborted")


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} must be NAME=VALUE, not {item!r}")
        out[key] = value
    return out


def progress_bar(done: int, total: int, width: int = 20) -> str:
    filled = width if total == 0 else min(width, done * width // total)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def format_run(obj: Mapping[str, Any], outputs: bool = True) -> str:
    """The run log tree of an ActionRun, as `stead run logs` prints it."""
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


async def _call(args: argparse.Namespace) -> int:
    async with KubeClient(load_access(args.kubeconfig)) as kube:
        try:
            return int(await args.handler(kube, args))
        except ApiError as error:
            print(f"stead: {error.message}", file=sys.stderr)
            return 1


async def _launch(kube: KubeClient, args: argparse.Namespace) -> int:
    body = {"apiVersion": API_VERSION, "kind": "App", "metadata": {"name": args.name, "namespace": args.namespace},
            "spec": {"blueprint": args.blueprint, "inputs": _pairs(args.input, "--input")}}
    await kube.request("POST", custom_path("apps", args.namespace), body)
    print(f"app/{args.name} launched (its create run: {args.name}-create)")
    return 0


async def _run_action(kube: KubeClient, args: argparse.Namespace) -> int:
    body = {"apiVersion": API_VERSION, "kind": "ActionRun",
            "metadata": {"generateName": f"{args.app}-{args.action}-"[:60].lower().replace("_", "-"),
                         "namespace": args.namespace},
            "spec": {"app": args.app, "action": args.action, "arguments": _pairs(args.arg, "--arg")}}
    made = await kube.request("POST", custom_path("actionruns", args.namespace), body)
    args.run = made["metadata"]["name"]
    print(f"actionrun/{args.run} created")
    return await _logs(kube, args) if args.follow else 0


async def _logs(kube: KubeClient, args: argparse.Namespace) -> int:
    shown = ""
    while True:
        obj = await kube.request("GET", custom_path("actionruns", args.namespace, args.run))
        text = format_run(obj)
        state = (obj.get("status") or {}).get("state")
        if not args.follow:
            print(text)
            return 0 if state in (None, "Pending", "Running", "Succeeded") else 1
        if text != shown:
            if shown and sys.stdout.isatty():
                sys.stdout.write(f"\x1b[{shown.count(chr(10)) + 1}F\x1b[J")
            print(text, flush=True)
            shown = text
        if state in FINAL:
            return 0 if state == "Succeeded" else 1
        await asyncio.sleep(1.0)


async def _abort(kube: KubeClient, args: argparse.Namespace) -> int:
    await kube.request("PATCH", custom_path("actionruns", args.namespace, args.run), {"spec": {"abort": True}},
                       content_type="application/merge-patch+json")
    print(f"actionrun/{args.run}: abort requested")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--kubeconfig", type=Path)
    parser.set_defaults(func=lambda args: asyncio.run(_call(args)))


def add_app_commands(sub: Any) -> None:
    app = sub.add_parser("app", help="launch apps and run their actions")
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
    _common(run)
    run.set_defaults(handler=_run_action)

    runs = sub.add_parser("runs", help="ActionRuns: logs, abort (also spelled `stead run logs|abort`)")
    rsub = runs.add_subparsers(metavar="ACTION")
    logs = rsub.add_parser("logs", help="the run log tree with per-task output")
    logs.add_argument("run")
    logs.add_argument("-f", "--follow", action="store_true")
    _common(logs)
    logs.set_defaults(handler=_logs)
    abort = rsub.add_parser("abort", help="abort a run")
    abort.add_argument("run")
    _common(abort)
    abort.set_defaults(handler=_abort)


def rewrite_argv(argv: Sequence[str]) -> list[str]:
    """`stead run logs|abort ...` is `stead runs logs|abort ...` (`stead run` alone runs the operator)."""
    args = list(argv)
    if len(args) >= 2 and args[0] == "run" and args[1] in ("logs", "abort"):
        args[0] = "runs"
    return args


__all__ = ["add_app_commands", "format_run", "rewrite_argv"]
