"""`stead actionrun logs` on a terminal (`stead app run -f` too): the run log tree drawn by rich, printed once or
redrawn live; imported only on a terminal (`operators.calm.cli_runs.LOGS_RICH`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from operators.calm.cli import duration, run_exit_code, run_final
from operators.runtime import Requester, parse_instant, pause


def _span(items: Sequence[Mapping[str, Any]], now: datetime, start: str = "startedAt",
          end: str = "finishedAt") -> str:
    """How long the items took: first start to last finish, or to now while one of them has not finished."""
    starts = [t for t in (parse_instant(i.get(start)) for i in items) if t]
    if not starts:
        return ""
    ends = [parse_instant(i.get(end)) for i in items]
    finish = now if any(e is None for e in ends) else max(e for e in ends if e)
    return duration((finish - min(starts)).total_seconds())


STYLES = {"pending": ("◷", "dim"), "running": ("●", "bold yellow"), "success": ("✔", "green"),
          "failure": ("✖", "bold red"), "aborted": ("⊘", "magenta"), "skipped": ("○", "dim"),
          "Pending": ("◷", "dim"), "Running": ("●", "bold yellow"), "Succeeded": ("✔", "bold green"),
          "Failed": ("✖", "bold red"), "Aborted": ("⊘", "bold magenta")}


def render_run(obj: Mapping[str, Any], tail: int | None = 0, now: datetime | None = None) -> RenderableType:
    """The run log tree of an ActionRun for a terminal (what `stead actionrun logs -f` shows live, like `argo watch`):
    each task and its replicas with state, attempts, exit code, duration and message, the last `tail` lines of
    each replica's output (None: all of them), and a progress bar of the task instances done."""
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


async def logs_rich(kube: Requester, args: argparse.Namespace, path: str, tail: int | None,
                     console: Console | None) -> int:
    """The terminal view: printed once, or (-f) redrawn in place every second until the run is final."""
    console = console or Console()
    obj = await kube.request("GET", path)
    if not args.follow:
        console.print(render_run(obj, tail=tail))
        return run_exit_code(obj)
    with Live(render_run(obj, tail=tail or 0), console=console, auto_refresh=False, transient=False) as live:
        while not run_final(obj):
            await pause(1.0)
            obj = await kube.request("GET", path)
            live.update(render_run(obj, tail=tail or 0), refresh=True)
    return run_exit_code(obj)
