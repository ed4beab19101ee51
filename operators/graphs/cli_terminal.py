"""`stead graph status` (and `execute -f`) on a terminal: a run's tree of nodes and tasks drawn by rich,
printed once or redrawn live; imported only on a terminal (`operators.graphs.cli_status.STATUS_RICH`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from operators.graphs.cli_status import exit_code, final
from operators.graphs.views import progress_counts, run_footer, run_header, took, would_change
from operators.runtime import Requester, pause

STYLES = {"planned": ("◷", "dim"), "pending": ("◷", "dim"), "running": ("●", "bold yellow"),
          "success": ("✔", "green"), "failure": ("✖", "bold red"), "aborted": ("⊘", "magenta"),
          "skipped": ("○", "dim"), "noop": ("◌", "cyan"), "Pending": ("◷", "dim"), "Planning": ("◷", "yellow"),
          "Running": ("●", "bold yellow"), "Succeeded": ("✔", "bold green"), "Failed": ("✖", "bold red"),
          "Aborted": ("⊘", "bold magenta")}


def render_run(obj: Mapping[str, Any], now: datetime | None = None) -> RenderableType:
    """The terminal view of a GraphRun (what `-f` redraws in place): a tree of nodes and their tasks with
    state marks, and a progress bar of the planned task instances finished."""
    status = obj.get("status") or {}
    state = str(status.get("state") or "Pending")

    def mark(value: str) -> Text:
        glyph, style = STYLES.get(value, ("?", ""))
        return Text(f"{glyph} {value}", style=style)

    tree = Tree(Text.assemble((run_header(obj).rsplit("  ", 1)[0], "bold"), "  ", mark(state)))
    for node in status.get("nodes") or []:
        tasks = node.get("tasks") or []
        done = sum(1 for t in tasks if t.get("state") in ("success", "failure", "aborted", "skipped", "noop"))
        branch = tree.add(Text.assemble((str(node.get("name") or "(anchors)"), "bold cyan"),
                                        (f"  {done}/{len(tasks)}", "dim")))
        for task in tasks:
            extra = [f"attempts {task['attempts']}"] if task.get("attempts") else []
            if took(task, now):
                extra.append(took(task, now))
            line = Text.assemble((str(task["task"]), "bold"), "  ", mark(str(task.get("state"))),
                                 ("".join(f"  {e}" for e in extra), "dim"))
            if task.get("reason"):
                line.append(f"  {task['reason']}", style="red" if task.get("state") == "failure" else "dim")
            if would_change(task):
                line.append(f"  {would_change(task)}", style="cyan")
            leaf = branch.add(line)
            for out in str(task.get("output") or "").splitlines()[-10:]:
                leaf.add(Text(f"| {out}", style="dim", no_wrap=True, overflow="ellipsis"))
    done, total = progress_counts(status.get("progress"))
    if status.get("progress") and "/" not in str(status["progress"]):  # a dry run: nothing ran, no bar
        parts: list[RenderableType] = [tree, Text(str(status["progress"]), style="bold")]
        parts.extend(Text(line, style="dim") for line in run_footer(obj))
        return Group(*parts)
    colour = {"Succeeded": "green", "Failed": "red", "Aborted": "magenta"}.get(state, "yellow")
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(total, 1), completed=min(done, total) if total > 0 else 0, width=40,
                            complete_style=colour, finished_style=colour),
                Text(f"{done}/{total}", style="bold"), Text(f"{(100 * done // total) if total > 0 else 0}%",
                                                            style="dim"))
    parts = [tree, bar]
    parts.extend(Text(line, style="red" if line.startswith("reason") else "dim") for line in run_footer(obj))
    return Group(*parts)


async def status_rich(kube: Requester, path: str, obj: dict[str, Any], follow: bool, interval: float,
                       console: Console | None) -> int:
    """The terminal view: printed once, or (-f) redrawn in place until the run ends."""
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
