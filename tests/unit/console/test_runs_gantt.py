"""A run's timeline and DAG layout (operators/console/views/gantt.py): coordinates the browser only scales."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from operators.console.views.gantt import dag_layout, task_edges, timeline

NOW = datetime(2026, 1, 1, 0, 1, 0, tzinfo=UTC)


def item(task: str, state: str, started: str | None, finished: str | None = None) -> dict[str, Any]:
    return {"id": task, "task": task, "state": state, "started": started, "finished": finished}


def test_a_timeline_has_a_row_per_node_and_lanes_for_instances_that_overlap() -> None:
    groups = [
        {"label": "ctl", "name": "ctl", "tasks": [item("db", "success", "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z"),
                                                  item("late", "pending", None)]},
        {"label": "cmp", "name": "cmp", "tasks": [
            item("a", "success", "2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"),
            item("b", "running", "2026-01-01T00:00:15Z"),  # overlaps a: a second lane
            item("c", "success", "2026-01-01T00:00:20Z", "2026-01-01T00:00:25Z")]},  # after a: a's lane again
        {"label": "idle", "name": "idle", "tasks": [item("x", "skipped", None)]}]
    chart = timeline(groups, "2026-01-01T00:00:00Z", NOW)
    assert [(r["label"], r["lane"], r["lanes"]) for r in chart["rows"]] == [("ctl", 0, 1), ("cmp", 1, 2)]
    bars = {b["task"]: (b["x0"], b["x1"], b["lane"]) for r in chart["rows"] for b in r["bars"]}
    assert bars == {"db": (0.0, 10.0, 0), "a": (10.0, 20.0, 1), "b": (15.0, 60.0, 2), "c": (20.0, 25.0, 1)}
    assert chart["span"] == 60.0 and chart["lanes"] == 3


def test_a_timeline_without_a_run_start_begins_at_the_first_instance() -> None:
    groups = [{"label": "n", "tasks": [item("t", "success", "2026-01-01T00:00:30Z", "2026-01-01T00:00:31Z")]}]
    assert timeline(groups, None, NOW)["rows"][0]["bars"][0]["x0"] == 0.0
    assert timeline([{"label": "n", "tasks": [item("t", "pending", None)]}], None, NOW)["rows"] == []


def test_edges_come_from_requires_required_for_cross_deps_and_regexes_with_absent_tasks_contracted() -> None:
    tasks: list[dict[str, Any]] = [
        {"id": "db", "type": "shell"},
        {"id": "hidden", "type": "shell", "requires": ["db"]},
        {"id": "app", "type": "shell", "requires": ["hidden"], "cross-depends": [{"name": "/^d.$/", "role": ["*"]}]},
        {"id": "report", "type": "shell", "cross_depends": [{"name": "app"}]},
        {"id": "first", "type": "shell", "required_for": ["db"]},
    ]
    assert task_edges(tasks, ["first", "db", "app", "report"]) == [
        ("app", "report"), ("db", "app"), ("first", "db")]


def test_a_dag_is_layered_by_generations_and_ordered_by_its_predecessors() -> None:
    nodes = ["z-root", "a-root", "under-a", "under-z", "end"]
    edges = [("z-root", "under-z"), ("a-root", "under-a"), ("under-a", "end"), ("under-z", "end")]
    layout = dag_layout(nodes, edges)
    placed = {n["id"]: (n["layer"], n["slot"]) for n in layout["nodes"]}
    # under-z sits beside z-root (slot 0), under-a beside a-root (slot 1): no crossing edges
    assert placed == {"z-root": (0, 0), "a-root": (0, 1), "under-z": (1, 0), "under-a": (1, 1), "end": (2, 0)}
    assert (layout["layers"], layout["width"]) == (3, 2) and ["a-root", "under-a"] in layout["edges"]


def test_a_cycle_is_drawn_in_one_layer_rather_than_failing() -> None:
    layout = dag_layout(["a", "b", "c"], [("a", "b"), ("b", "a"), ("b", "c")])
    assert {n["id"]: n["layer"] for n in layout["nodes"]} == {"a": 0, "b": 0, "c": 1}
