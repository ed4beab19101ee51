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

from pipelines.model import Instance, check_name
from pipelines.paths import RunPaths

PLAN_FILE = "graph-plan.json"
"""In the run's directory: the workflow, which step is which task on which node, the facts of the plan
and the data the conditions read (recorded as the environment's last data when the run succeeds)."""
PAGE_BYTES = 1 << 20
"""At most this much output per answer (the default and the most a caller may ask for): a page of a
long output, with the offset of the next one."""


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


@dataclass(frozen=True)
class Page:
    """`size` bytes stored in all; `text` holds bytes [offset, next_offset) (next_offset None: to the end)."""

    offset: int
    size: int
    text: str
    next_offset: int | None

    @property
    def truncated(self) -> bool:
        return self.next_offset is not None


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
    """Where the runner wrote the instance's output (`RunPaths.output_file`), inside the run's output
    directory (ValueError otherwise: a plan that does not hold runner names is not followed out of it)."""
    check_name(instance.step, "step")
    if instance.node:
        check_name(instance.node, "node")
    outputs = paths.output_dir.resolve()
    path = paths.output_file(instance.key).resolve()
    if path.parent != outputs:
        raise ValueError(f"instance {instance.key!r} leads out of the run's output directory")
    return path


def output_size(path: Path) -> int:
    """Bytes of output stored (0: none yet, or the instance printed nothing)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def read_page(path: Path, offset: int = 0, limit: int = PAGE_BYTES) -> Page:
    """Bytes [offset, offset + limit) of the output, cut back to a character boundary so that a page never
    splits a UTF-8 sequence (the next page starts with it; a limit smaller than one character gives that
    character whole). A missing file is an empty output."""
    limit = max(1, min(limit, PAGE_BYTES))
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            start = min(max(0, offset), size)
            handle.seek(start)
            data = handle.read(limit + 3)  # the rest of a character the limit would cut
    except FileNotFoundError:
        return Page(0, 0, "", None)
    if len(data) > limit:
        whole = _whole_characters(data[:limit])
        data = data[:whole] if whole > 0 else data[:_sequence_length(data[0])]
    end = start + len(data)
    return Page(start, size, data.decode("utf-8", errors="replace"), end if end < size else None)


def _sequence_length(lead: int) -> int:
    """How many bytes the UTF-8 sequence that `lead` starts has (1 for a byte that starts none)."""
    return 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1


def _whole_characters(data: bytes) -> int:
    """The length of the longest prefix of `data` that does not end inside a UTF-8 sequence."""
    i = len(data) - 1
    while i >= 0 and len(data) - i < 4 and (data[i] & 0xC0) == 0x80:  # continuation bytes: 10xxxxxx
        i -= 1
    if i < 0:
        return len(data)
    return len(data) if len(data) - i >= _sequence_length(data[i]) else i
