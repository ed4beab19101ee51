"""Fuel's merge of one graph type: release < the environment's enabled plugins < the environment.

Each level is a list of tasks; a later level replaces a task with the same id WHOLE (nailgun's
code does this; the blueprint's text speaks of merging fields, which Fuel users never got). A
replaced task keeps its place in the order; a new task is appended after those of the earlier
levels. Plugins come in the environment's plugin order; two plugins defining the same id is an
error naming both plugins and the id (neither may silently win). Duplicate ids inside one graph
are an error too (the admission check refuses them; the merge does not trust that it ran).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from operators.graphs.models import DeploymentGraphSpec, Task


class MergeError(ValueError):
    """Graphs that cannot be merged; the message names the graphs and the task id."""


@dataclass(frozen=True)
class MergedGraph:
    """The merged tasks in order, and where each came from (`release mitaka-9.0`, `plugin lma`...)."""

    tasks: list[Task]
    origin: dict[str, str] = field(default_factory=dict)

    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]


def merge_graphs(
    release: Sequence[Task] | None = None,
    plugins: Sequence[tuple[str, Sequence[Task]]] = (),
    environment: Sequence[Task] | None = None,
    *,
    release_name: str = "",
    environment_name: str = "",
) -> MergedGraph:
    """Merge the levels of one graph type. `plugins` are (plugin name, tasks), in the
    environment's order, enabled plugins only."""
    levels: list[tuple[str, Sequence[Task]]] = []
    if release is not None:
        levels.append((_label("release", release_name), release))
    plugin_of: dict[str, str] = {}
    for name, tasks in plugins:
        label = _label("plugin", name)
        for task in tasks:
            other = plugin_of.get(task.id)
            if other is not None and other != name:
                raise MergeError(f"plugins {other!r} and {name!r} both define task {task.id!r}")
            plugin_of[task.id] = name
        levels.append((label, tasks))
    if environment is not None:
        levels.append((_label("environment", environment_name), environment))

    merged: dict[str, Task] = {}
    origin: dict[str, str] = {}
    for label, tasks in levels:
        seen: set[str] = set()
        for task in tasks:
            if task.id in seen:
                raise MergeError(f"{label}: task id {task.id!r} appears twice")
            seen.add(task.id)
            merged[task.id] = task  # dict keeps the first insertion's place: a replacement stays put
            origin[task.id] = label
    return MergedGraph(list(merged.values()), origin)


def merge_specs(
    graphs: Iterable[DeploymentGraphSpec],
    graph_type: str,
    *,
    release: str,
    plugins: Sequence[str],
    environment: str,
) -> MergedGraph:
    """Merge the graphs of `graph_type` that belong to the environment's release, its enabled
    plugins (in this order) and the environment itself; other graphs are ignored. Two graphs of
    the same owner and type (the admission refuses the second): an error."""
    by_owner: dict[tuple[str, str], DeploymentGraphSpec] = {}
    for graph in graphs:
        if graph.type != graph_type:
            continue
        key = graph.owner
        if key in by_owner:
            raise MergeError(f"two graphs of type {graph_type!r} for {key[0]} {key[1]!r}")
        by_owner[key] = graph
    rel = by_owner.get(("release", release))
    env = by_owner.get(("environment", environment))
    plugin_levels = [(p, by_owner[("plugin", p)].tasks) for p in plugins if ("plugin", p) in by_owner]
    return merge_graphs(
        rel.tasks if rel else None, plugin_levels, env.tasks if env else None,
        release_name=release, environment_name=environment,
    )


def _label(kind: str, name: str) -> str:
    return f"{kind} {name!r}" if name else kind
