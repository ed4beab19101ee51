"""What the console's run view shows of a run, shaped from its status (pure: no cluster, no HTTP).

One shape for the three kinds of run the console shows (docs/console.md, "Runs"):

- an **ActionRun**: `status.runLog` is a list of tasks, each with its instances per replica; the view
  turns it round into a tree per replica (the replica's tasks in the workflow's order), because what a
  user follows is "what is happening on app_tier-1";
- a **GraphRun**: `status.nodes` is already per node, each with its task instances in plan order;
- a **lifecycle transfer** of a ServiceInstance is an ActionRun of the instance's App (its create,
  update or delete action), so it is shown as one.

Every instance carries its state, attempts, start, end and duration, and the tail of its output the
status keeps (masked by the runner before it was ever written). The whole output of a GraphRun's
instance is read from the operator's API (`output_ref` says which instance); an ActionRun's whole
output is on the operator's volume only, so its view has the tail alone.

Times are the runner's RFC 3339 strings; durations are seconds (a running instance's is measured up to
`now`, which the caller passes so that the functions stay pure). The per-group timeline (`timeline`)
is laid out here too: the browser only scales it to its width.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from operators.console.views.gantt import timeline
from operators.runtime import parse_instant

FINAL = frozenset({"Succeeded", "Failed", "Aborted"})
"""Run states after which nothing changes (`operators.runtime.FINAL_RUN_STATES`)."""
LIVE_TASK_STATES = frozenset({"running", "pending", "planned"})
"""Instance states whose output may still grow."""
STATE_RANK = ("failure", "aborted", "running", "pending", "planned", "success", "noop", "skipped")
"""A group's state is the first of these any of its instances is in (a failure shows above all)."""
APP_GROUP = "(application)"
"""The label of an ActionRun's tasks that run on no replica (a delay, an app-level task)."""
ANCHOR_GROUP = "(anchors)"
"""The label of a GraphRun's stage anchors (its instances on node "")."""


def duration(started: Any, finished: Any, now: datetime) -> float | None:
    """Seconds from `started` to `finished` (to `now` while it has not finished); None when it never
    started. Never negative: clocks of different hosts may disagree by a little."""
    start = parse_instant(started)
    if start is None:
        return None
    end = parse_instant(finished) or now
    return round(max(0.0, (end - start).total_seconds()), 3)


def group_state(states: Iterable[str]) -> str:
    """The state that sums up a group of instances (`STATE_RANK`); `pending` for an empty one."""
    found = set(states)
    return next((s for s in STATE_RANK if s in found), "pending" if not found else sorted(found)[0])


def _instance(task: str, group: str, record: Mapping[str, Any], started_key: str, finished_key: str,
              now: datetime, **more: Any) -> dict[str, Any]:
    started, finished = record.get(started_key), record.get(finished_key)
    state = str(record.get("state") or "pending")
    item: dict[str, Any] = {
        "id": f"{task}@{group}", "task": task, "state": state, "attempts": int(record.get("attempts") or 0),
        "started": started, "finished": finished,
        "duration": duration(started, finished if finished or state not in LIVE_TASK_STATES else None, now),
        "output": str(record.get("output") or ""), **more}
    return item


def _run_fields(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    state = status.get("state") or "Pending"
    started, finished = status.get("startTime"), status.get("endTime")
    return {
        "kind": obj.get("kind"), "name": meta.get("name"), "namespace": meta.get("namespace"),
        "state": state, "final": state in FINAL, "started": started, "finished": finished,
        "duration": duration(started, finished if finished or state in FINAL else None, now),
        "failedTask": status.get("failedTask"), "reason": status.get("reason"), "message": status.get("message"),
    }


def action_run_view(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """An ActionRun as the run view shows it: per replica, its tasks in the workflow's order."""
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for task in status.get("runLog") or []:
        name = str(task.get("task") or task.get("step") or "?")
        replicas = task.get("replicas") or []
        for record in replicas:
            group = str(record.get("target") or "")
            ref = {"plural": "actionruns", "step": task.get("step"), "target": group or None}
            groups.setdefault(group, []).append(_instance(
                name, group or APP_GROUP, record, "startedAt", "finishedAt", now, step=task.get("step"),
                type=task.get("type"), exitCode=record.get("exitCode"), reason=record.get("message"), outputRef=ref))
        if not replicas:  # not reached yet: shown on the application until it has instances
            groups.setdefault("", []).append(_instance(name, APP_GROUP, {"state": task.get("state")}, "", "", now,
                                                       step=task.get("step"), type=task.get("type"), outputRef=None))
    progress = status.get("progress") or {}
    view = {**_run_fields(obj, now), "app": spec.get("app"), "action": spec.get("action"),
            "progress": status.get("progressText") or (f"{progress.get('done', 0)}/{progress.get('total', 0)}"
                                                        if progress else None),
            "groupKind": "replica", "wholeOutput": True,
            "groups": _groups(groups, APP_GROUP, first_unnamed=True)}
    view["timeline"] = timeline(view["groups"], view["started"], now)
    return view


def graph_run_view(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A GraphRun as the run view shows it: per node, its task instances in plan order; each instance
    names what the operator's output route needs to find it (`outputRef`)."""
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    types = [str(g.get("type") or "default") for g in spec.get("graphs") or []]
    only_type = types[0] if len(set(types)) == 1 else None
    groups: dict[str, list[dict[str, Any]]] = {}
    for node in status.get("nodes") or []:
        group = str(node.get("name") or "")
        for record in node.get("tasks") or []:
            task = str(record.get("task") or "?")
            ref = {"task": task, "node": group or None, "type": only_type}
            groups.setdefault(group, []).append(_instance(
                task, group or ANCHOR_GROUP, record, "started", "finished", now, reason=record.get("reason"),
                noop=record.get("noop"), outputRef=ref))
    plan = status.get("plan") or {}
    view = {**_run_fields(obj, now), "environment": spec.get("environment"), "graphTypes": types,
            "progress": status.get("progress"), "dryRun": bool(spec.get("dryRun")), "noop": bool(spec.get("noop")),
            "plan": plan, "omitted": status.get("omitted"), "groupKind": "node", "wholeOutput": True,
            "groups": _groups(groups, ANCHOR_GROUP, first_unnamed=False)}
    view["taskStates"] = task_states(view["groups"])
    view["timeline"] = timeline(view["groups"], view["started"], now)
    return view


def _groups(groups: Mapping[str, Sequence[dict[str, Any]]], unnamed: str, first_unnamed: bool
            ) -> list[dict[str, Any]]:
    """The groups in the status's order, the unnamed one (application tasks, anchors) first or last."""
    names = list(groups)
    if "" in groups:
        names.remove("")
        names = ["", *names] if first_unnamed else [*names, ""]
    return [{"name": name, "label": name or unnamed, "state": group_state(i["state"] for i in groups[name]),
             "tasks": list(groups[name])} for name in names]


def task_states(groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each task's state over all its instances (`group_state`): how the DAG, a node per task, colours it."""
    found: dict[str, list[str]] = {}
    for group in groups:
        for item in group.get("tasks") or []:
            found.setdefault(str(item["task"]), []).append(str(item["state"]))
    return {task: group_state(states) for task, states in found.items()}


def run_view(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The view of an ActionRun or a GraphRun (by its kind); ValueError for any other object."""
    kind = obj.get("kind")
    if kind == "ActionRun":
        return action_run_view(obj, now)
    if kind == "GraphRun":
        return graph_run_view(obj, now)
    raise ValueError(f"kind: an ActionRun or a GraphRun, not {kind!r}")


def transfer_runs(instance: Mapping[str, Any], runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A ServiceInstance's lifecycle transfers that ran an action: the ActionRuns of its App (the App is
    named after the instance, `status.app`), newest first, each as a line of a list."""
    meta = instance.get("metadata") or {}
    app = (instance.get("status") or {}).get("app") or meta.get("name")
    found = [r for r in runs if (r.get("spec") or {}).get("app") == app]
    found.sort(key=lambda r: str((r.get("metadata") or {}).get("creationTimestamp") or ""), reverse=True)
    return [{"name": (r.get("metadata") or {}).get("name"), "action": (r.get("spec") or {}).get("action"),
             "state": (r.get("status") or {}).get("state") or "Pending",
             "started": (r.get("status") or {}).get("startTime"), "finished": (r.get("status") or {}).get("endTime"),
             "failedTask": (r.get("status") or {}).get("failedTask")} for r in found]
