"""How `stead graph` shows graphs and runs: the tables of `list` and `history`, a run's tree of nodes and tasks
(as text, and drawn live with rich on a terminal), and a plan. Pure functions of the objects as the API
server returns them, tested without a cluster; the drawing with rich is `cli_terminal`'s, imported only on a
terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from operators.graphs.objects import owner_of, type_of
from operators.runtime import parse_instant, table


def format_graphs(items: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for item in items:
        owner = owner_of(item)
        rows.append((str(item["metadata"]["name"]), type_of(item), f"{owner[0]}/{owner[1]}" if owner else "-",
                     str(len((item.get("spec") or {}).get("tasks") or []))))
    return table(("NAME", "TYPE", "OWNER", "TASKS"), rows)


def progress_bar(progress: str | None, width: int = 20) -> str:
    if progress and "/" not in progress:  # a dry run's "3 planned (dry run)": nothing ran, no bar
        return progress
    done, total = progress_counts(progress)
    filled = 0 if total <= 0 else max(0, min(width, done * width // total))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def progress_counts(progress: str | None) -> tuple[int, int]:
    """A run's progress ("done/total") as numbers; (0, 0) when it is not one."""
    done, _, total = str(progress or "0/0").partition("/")
    return (int(done), int(total)) if done.isdigit() and total.isdigit() else (0, 0)


def took(task: Mapping[str, Any], now: datetime | None = None) -> str:
    """How long a task took (or has been running): 0.4s, 12s, 1m05s."""
    start = parse_instant(task.get("started"))
    if start is None:
        return ""
    end = parse_instant(task.get("finished")) or now or datetime.now(UTC)
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


def run_header(obj: Mapping[str, Any]) -> str:
    """The first line of a run's views: its name, environment, types, mode and state."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    types = ",".join(str(g.get("type") or "default") for g in spec.get("graphs") or [])
    mode = " (dry run)" if spec.get("dryRun") else " (noop)" if spec.get("noop") else ""
    return (f"graphrun/{obj['metadata']['name']}  environment {spec.get('environment')}  types {types}{mode}  "
            f"{status.get('state') or 'Pending'}")


def run_footer(obj: Mapping[str, Any]) -> list[str]:
    """The last lines of a run's views: what the status leaves out, and why the run failed."""
    status = obj.get("status") or {}
    lines = []
    if status.get("omitted"):
        lines.append(f"({status['omitted']} more task instances not listed in the status)")
    plan = status.get("plan") or {}
    if plan.get("outsideSubset"):
        lines.append(f"{plan['outsideSubset']} dependencies on nodes outside the subset counted as satisfied")
    stalled = next((c for c in status.get("conditions") or []
                    if c.get("type") == "Stalled" and c.get("status") == "True" and c.get("message")), None)
    if stalled is not None and status.get("state") in ("Failed", "Aborted"):
        # the condition's message says what to do (grant the account get on the Secret, name one of the types);
        # status.reason is the short form
        lines.append(f"reason: {stalled['message']}")
    elif status.get("reason"):
        lines.append(f"reason: {status.get('failedTask') or ''} {status['reason']}".replace("  ", " "))
    return lines


def would_change(task: Mapping[str, Any]) -> str:
    """What a noop run found would change for a task (its status' `noop`), in a line; "" when none."""
    noop = task.get("noop")
    if not isinstance(noop, Mapping):
        return ""
    count = int(noop.get("wouldChange") or 0)
    if not count:
        return "nothing would change"
    listed = ", ".join(str(r) for r in noop.get("resources") or [])
    more = f" and {noop['more']} more" if noop.get("more") else ""
    return f"{count} would change" + (f": {listed}{more}" if listed else "")


def format_run(obj: Mapping[str, Any], now: datetime | None = None) -> str:
    """A GraphRun as `stead graph status` prints it: a header, each node with its tasks (state, attempts,
    time, reason; failed tasks' output tails), the progress, and why it failed."""
    status = obj.get("status") or {}
    lines = [run_header(obj)]
    for node in status.get("nodes") or []:
        lines.append(str(node.get("name") or "(anchors)"))
        tasks = node.get("tasks") or []
        for n, task in enumerate(tasks):
            branch = "└─" if n == len(tasks) - 1 else "├─"
            extra = [f"attempts {task['attempts']}"] if task.get("attempts") else []
            if took(task, now):
                extra.append(took(task, now))
            if task.get("reason"):
                extra.append(str(task["reason"]))
            if would_change(task):
                extra.append(would_change(task))
            lines.append(f"  {branch} {task['task']}  {task['state']}" + "".join(f"  {e}" for e in extra))
            for line in str(task.get("output") or "").splitlines()[-10:]:
                lines.append(f"  {'  ' if n == len(tasks) - 1 else '│ '}   | {line}")
    if not status.get("nodes"):
        lines.append("(no plan yet)")
    lines.append(f"progress {progress_bar(status.get('progress'))}")
    lines.extend(run_footer(obj))
    return "\n".join(lines)


def format_plan(obj: Mapping[str, Any]) -> str:
    """A dry run as `stead graph plan` prints it: per node its task instances numbered in the order they run
    (state, and why when not planned), the anchors, the counts, and the dependencies on nodes outside the
    subset, counted as satisfied."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    types = ", ".join(str(g.get("type") or "default") for g in spec.get("graphs") or [])
    if status.get("state") != "Succeeded":
        return "\n".join([f"environment {spec.get('environment')}, types {types}: no plan", *run_footer(obj)])
    lines = [f"environment {spec.get('environment')}, types {types}: the plan (nothing ran)"]
    for node in status.get("nodes") or []:
        lines.append(str(node.get("name") or "(anchors: stages and groups, on no node)"))
        for n, task in enumerate(node.get("tasks") or [], start=1):
            why = f"  {task['reason']}" if task.get("reason") else ""
            lines.append(f"  {n:>3}. {task['task']}  {task['state']}{why}")
    plan = status.get("plan") or {}
    lines.append(f"{plan.get('planned', 0)} task instances run, {plan.get('skipped', 0)} skipped, "
                 f"{plan.get('noop', 0)} noop; {plan.get('edges', 0)} dependencies")
    if status.get("omitted"):
        lines.append(f"({status['omitted']} more task instances not listed)")
    outside = int(plan.get("outsideSubset") or 0)
    if outside:
        lines.append(f"{outside} dependencies on nodes outside the subset, counted as satisfied (those nodes are taken "
                     "as their last run left them):")
        edges = plan.get("outsideEdges") or []
        many = len({e.get("type") for e in edges}) > 1
        for edge in edges:
            lines.append(f"  {edge['dependent']} waits for {edge['dependency']}"
                         + (f"  ({edge['type']})" if many else ""))
        if outside > len(edges):
            lines.append(f"  (and {outside - len(edges)} more)")
    return "\n".join(lines)


HISTORY_COLUMNS = ("FINISHED", "RUN", "TYPE", "NODE", "TASK", "STATE", "DURATION", "ATTEMPTS", "CHANGES")


def format_history(entries: Sequence[Mapping[str, Any]]) -> str:
    """History entries (the API's JSON) as a table; CHANGES is what a noop run found would change."""
    rows = []
    for e in entries:
        noop = e.get("noop")
        changes = "" if not isinstance(noop, Mapping) else str(noop.get("wouldChange", 0))
        took = "" if e.get("duration") is None else f"{float(e['duration']):g}s"
        rows.append((str(e.get("finished") or "-"), str(e["run"]), str(e.get("type") or ""),
                     str(e.get("node") or "(anchor)"), str(e["task"]), str(e["state"]), took,
                     str(e.get("attempts") or 0), changes))
    return table(HISTORY_COLUMNS, rows)
