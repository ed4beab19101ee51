"""`stead app launch|run`, `stead actionrun logs|abort`, `stead blueprint deps`: the actions, run with the API
client; imported when one of them runs (`operators.calm.cli` is the parsers)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from operators import API_VERSION
from operators.calm.cli import PLURALS, dump_deps, dump_status, format_deps, format_run, run_exit_code, run_final
from operators.runtime import ApiError, Requester, custom_path, pairs, pause
from operators.runtime import command as lazy

if TYPE_CHECKING:
    from rich.console import Console

LOGS_RICH = lazy("operators.calm.cli_terminal:logs_rich")
"""`stead actionrun logs` on a terminal: its module imports rich, which a pipe does not need."""


async def launch_app(kube: Requester, args: argparse.Namespace) -> int:
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


async def run_action(kube: Requester, args: argparse.Namespace) -> int:
    body = {"apiVersion": API_VERSION, "kind": "ActionRun",
            "metadata": {"generateName": f"{args.app}-{args.action}-"[:60].lower().replace("_", "-"),
                         "namespace": args.namespace},
            "spec": {"app": args.app, "action": args.action, "arguments": pairs(args.arg, "--arg")}}
    made = await kube.request("POST", custom_path(PLURALS["ActionRun"], args.namespace), body)
    args.run = made["metadata"]["name"]
    print(f"actionrun/{args.run} created")
    return await logs(kube, args) if args.follow else 0


async def logs(kube: Requester, args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the run (plain text, a rich view on a terminal, or -o json|yaml); -f: until it is final."""
    path = custom_path(PLURALS["ActionRun"], args.namespace, args.run)
    output, tail = getattr(args, "output", None), getattr(args, "tail", None)
    if output:
        obj = await kube.request("GET", path)
        while args.follow and not run_final(obj):
            await pause(1.0)
            obj = await kube.request("GET", path)
        print(dump_status(obj, output))
        return run_exit_code(obj)
    if console is not None or sys.stdout.isatty():
        code: int = await LOGS_RICH(kube, args, path, tail, console)
        return code
    shown = ""
    while True:
        obj = await kube.request("GET", path)
        text = format_run(obj)
        if not args.follow:
            print(text)
            return run_exit_code(obj)
        if text != shown:
            print(text, flush=True)
            shown = text
        if run_final(obj):
            return run_exit_code(obj)
        await pause(1.0)


async def abort(kube: Requester, args: argparse.Namespace) -> int:
    await kube.request("PATCH", custom_path(PLURALS["ActionRun"], args.namespace, args.run), {"spec": {"abort": True}},
                       content_type="application/merge-patch+json")
    print(f"actionrun/{args.run}: abort requested")
    return 0


async def deps(kube: Requester, args: argparse.Namespace) -> int:
    obj = await kube.request("GET", custom_path(PLURALS["Blueprint"], args.namespace, args.name))
    print(dump_deps(obj, args.output) if args.output else format_deps(obj))
    return 1 if (obj.get("status") or {}).get("errors") else 0
