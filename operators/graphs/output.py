"""A run's task instances and their whole output, as the run's files hold them (pure: no Kubernetes).

The runner appends each instance's output, masked line by line before it is written, to
`<run dir>/output/<step>@<node>.log` (`pipelines.paths`); the GraphRun's status keeps the tail of a
failure's output only (an object must stay small). This module finds an instance in the run's plan
(`graph-plan.json`: step id -> task, node) and reads its output a page at a time, so that the API
(`GET /api/v1/graphruns/<run>/output/<task>/`) answers with a bounded body however long a task talked.

Names that come from a URL are never joined into a path: a task and node are looked up in the plan,
and only the step id the plan gives (checked again against the runner's name pattern) names the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.model import Instance
from pipelines.pages import PAGE_BYTES, Page, instance_output, output_size, read_page
from pipelines.paths import RunPaths

__all__ = ["PAGE_BYTES", "PLAN_FILE", "Ambiguous", "NoSuchInstance", "Page", "RunInstance", "find", "instances",
           "output_file", "output_size", "read_page", "read_plan", "select"]

PLAN_FILE = "graph-plan.json"
"""In the run's directory: the workflow, which step is which task on which node, the facts of the plan
and the data the conditions read (recorded as the environment's last data when the run succeeds)."""


class NoSuchInstance(LookupError):
    """The run has no instance of that task (on that node, of that type); the message says what it has."""

    def __init__(self, missing: str, message: str) -> None:
        super().__init__(message)
        self.missing = missing  # "task", "node" or "type"
        self.message = message


class Ambiguous(ValueError):
    """The task runs on several nodes (or in several types) and the caller named none of them."""


@dataclass(frozen=True)
class RunInstance:
    """One task on one node of one graph type of the run ("" for an anchor's node)."""

    graph_type: str
    task: str
    node: str
    step: str

    @property
    def key(self) -> str:
        """The runner's name for the instance (its output file is `output/<key>.log`)."""
        return Instance(self.step, self.node).key


def read_plan(run_dir: Path) -> dict[str, Any] | None:
    """The run's saved plan (`PLAN_FILE`), or None when it has none yet (or it is unreadable)."""
    try:
        saved = json.loads((run_dir / PLAN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def instances(plan: Mapping[str, Any]) -> list[RunInstance]:
    """The instances of a saved plan (`graph-plan.json`), in plan order. A step id starts with its graph's
    prefix (the type, `type.2` for a type given twice), which has no `:`."""
    found = []
    for step, (task, node) in (plan.get("index") or {}).items():
        found.append(RunInstance(str(step).split(":", 1)[0], str(task), str(node or ""), str(step)))
    return found


def select(found: Sequence[RunInstance], *, task: str | None = None, node: str | None = None,
           graph_type: str | None = None) -> list[RunInstance]:
    """The instances matching what is given (None: any)."""
    return [i for i in found if (task is None or i.task == task) and (node is None or i.node == node)
            and (graph_type is None or i.graph_type == graph_type)]


def find(found: Sequence[RunInstance], run: str, task: str, node: str | None,
         graph_type: str | None) -> RunInstance:
    """The one instance of `task` (on `node`, of `graph_type`): NoSuchInstance naming what is missing and
    what there is, or Ambiguous naming the choices when several remain."""
    of_task = select(found, task=task)
    if not of_task:
        tasks = sorted({i.task for i in found})
        shown = ", ".join(tasks[:20]) + (f" and {len(tasks) - 20} more" if len(tasks) > 20 else "")
        raise NoSuchInstance("task", f"graph run {run} has no task {task!r} (its tasks: {shown or 'none'})")
    if graph_type is not None:
        of_task = select(of_task, graph_type=graph_type)
        if not of_task:
            types = ", ".join(sorted({i.graph_type for i in select(found, task=task)}))
            raise NoSuchInstance("type", f"task {task!r} of graph run {run} is in no graph of type {graph_type!r} "
                                         f"(its types: {types})")
    if node is not None:
        on_node = select(of_task, node=node)
        if not on_node:
            nodes = sorted(i.node or "(anchor)" for i in of_task)
            raise NoSuchInstance("node", f"task {task!r} of graph run {run} does not run on node {node!r} (its "
                                         f"nodes: {', '.join(nodes)})")
        of_task = on_node
    if len(of_task) > 1:
        choices = ", ".join(f"{i.node or '(anchor)'} ({i.graph_type})" for i in of_task)
        raise Ambiguous(f"task {task!r} of graph run {run} has {len(of_task)} instances: name one with node= "
                        f"(and type= when a task is in several types): {choices}")
    return of_task[0]


def output_file(paths: RunPaths, instance: RunInstance) -> Path:
    """Where the runner wrote the instance's output (`pipelines.pages.instance_output`: inside the run's output
    directory, ValueError otherwise: a plan that does not hold runner names is not followed out of it)."""
    return instance_output(paths, instance.step, instance.node, "node")
