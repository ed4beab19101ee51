"""`stead graph status`: a run printed (plain text, a rich tree on a terminal, or -o json|yaml), -f until it
ends. Imported when it runs (or `execute -f`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from operators.graphs.cli import FINAL, RUNS
from operators.graphs.cli_objects import object_path
from operators.graphs.views import format_run, render_run
from operators.runtime import ApiError, CommandError, Requester, dump, pause

if TYPE_CHECKING:
    from rich.console import Console


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
        return await status_rich(kube, path, obj, follow, interval, console)
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


async def status_rich(kube: Requester, path: str, obj: dict[str, Any], follow: bool, interval: float,
                       console: Console | None) -> int:
    """The terminal view: printed once, or (-f) redrawn in place until the run ends."""
    # here, not above: rich is for a terminal only (piped output and -o never import it)
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    if not follow:
        console.print(render_run(obj))
        return exit_code(obj)
    with Live(render_run(obj), console=console, auto_refresh=False, transient=False) as live:
        while not final(obj):
            await pause(interval)
            obj = await kube.request("GET", path)
            live.update(render_run(obj), refresh=True)
    return exit_code(obj)
