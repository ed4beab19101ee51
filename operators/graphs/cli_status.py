"""`stead graph status`: a run printed (plain text, a rich tree on a terminal, or -o json|yaml), -f until it
ends. Imported when it runs (or `execute -f`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from operators.graphs.cli import FINAL, RUNS
from operators.graphs.cli_objects import object_path
from operators.graphs.views import format_run
from operators.runtime import ApiError, CommandError, Requester, dump, pause
from operators.runtime import command as lazy

if TYPE_CHECKING:
    from rich.console import Console

STATUS_RICH = lazy("operators.graphs.cli_terminal:status_rich")
"""The terminal view: its module imports rich, which piped output and -o never need."""


def exit_code(obj: Mapping[str, Any]) -> int:
    return 0 if (obj.get("status") or {}).get("state") in (None, "Pending", "Planning", "Running", "Succeeded") else 1


def final(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("state") in FINAL


async def status(kube: Requester, args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the run (plain text, a rich tree on a terminal, or -o json|yaml); -f: until it ends, then the
    exit code says whether it succeeded."""

    path = object_path(RUNS, args.namespace, args.run)
    follow, output = getattr(args, "follow", False), getattr(args, "output", None)
    interval = getattr(args, "interval", 1.0)
    obj = await get_run(kube, args)
    if output:
        while follow and not final(obj):
            await pause(interval)
            obj = await kube.request("GET", path)
        print(dump(obj.get("status") or {}, output))
        return exit_code(obj)
    if console is not None or sys.stdout.isatty():
        code: int = await STATUS_RICH(kube, path, obj, follow, interval, console)
        return code
    shown = ""
    while True:
        text = format_run(obj)
        if text != shown:
            print(text, flush=True)
            shown = text
        if not follow or final(obj):
            return exit_code(obj)
        await pause(interval)
        obj = await kube.request("GET", path)


async def get_run(kube: Requester, args: argparse.Namespace) -> dict[str, Any]:
    try:
        return await kube.request("GET", object_path(RUNS, args.namespace, args.run))
    except ApiError as error:
        if error.status != 404:
            raise
    listed = await kube.request("GET", object_path(RUNS, args.namespace))
    names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])[-10:]
    raise CommandError(f"no graph run {args.run!r} in namespace {args.namespace} (runs here: "
                       f"{', '.join(names) or 'none'})")
