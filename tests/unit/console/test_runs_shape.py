"""The run view's shaping (operators/console/views/runs_shape.py): statuses as the operator writes them
(the ActionRun's runLog, `operators.calm.workflow.run_log`; the GraphRun's nodes, `GraphRunStatus`) turned
into a tree per replica or node with states, attempts, durations and output tails."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from operators.console.views.runs_shape import (
    APP_GROUP,
    action_run_view,
    duration,
    graph_run_view,
    group_state,
    run_view,
    transfer_runs,
)

NOW = datetime(2025, 1, 1, 12, 2, 0, tzinfo=UTC)
XSS = "<img src=x onerror=window.__xss=1><script>window.__xss=2</script>"


def action_run(final: bool) -> dict[str, Any]:
    """A run of `create` on two replicas, as `run_log` writes it: an app-level task, one per replica."""
    status: dict[str, Any] = {
        "state": "Failed" if final else "Running", "progress": {"done": 3, "total": 5}, "progressText": "3/5",
        "startTime": "2025-01-01T12:00:00Z",
        "runLog": [
            {"task": "prepare", "step": "s0", "type": "noop", "state": "success", "replicas": [
                {"target": "", "state": "success", "attempts": 1, "startedAt": "2025-01-01T12:00:00.000Z",
                 "finishedAt": "2025-01-01T12:00:00.200Z"}]},
            {"task": "deploy", "step": "s1", "type": "exec", "state": "failure" if final else "running",
             "replicas": [
                 {"target": "tier-0", "state": "success", "attempts": 1, "exitCode": 0,
                  "startedAt": "2025-01-01T12:00:14.000Z", "finishedAt": "2025-01-01T12:01:20.000Z",
                  "output": "pulling\nstarted"},
                 {"target": "tier-1", "state": "failure" if final else "running", "attempts": 2,
                  "startedAt": "2025-01-01T12:00:14.000Z", "output": XSS,
                  **({"exitCode": 3, "finishedAt": "2025-01-01T12:01:50.000Z",
                      "message": "script exited with code 3"} if final else {})}]},
            {"task": "register", "step": "s2", "type": "exec", "state": "pending", "replicas": []}]}
    if final:
        status.update(endTime="2025-01-01T12:01:51Z", failedTask="deploy@tier-1", reason="script exited with code 3")
    return {"kind": "ActionRun", "metadata": {"name": "shop-create", "namespace": "ns"},
            "spec": {"app": "shop", "action": "create"}, "status": status}


def graph_run(state: str = "Failed") -> dict[str, Any]:
    return {"kind": "GraphRun", "metadata": {"name": "first", "namespace": "ns"},
            "spec": {"environment": "env", "graphs": [{"type": "default"}]},
            "status": {"state": state, "progress": "1/3", "startTime": "2026-01-01T00:00:00Z",
                       "plan": {"instances": 4, "planned": 3}, "nodes": [
                           {"name": "", "tasks": [{"task": "deploy_end", "state": "noop", "reason": "stage"}]},
                           {"name": "node-1", "tasks": [
                               {"task": "netconfig", "state": "success", "attempts": 1,
                                "started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:00:12Z"},
                               {"task": "collector", "state": "failure", "attempts": 2, "reason": "exit code 3",
                                "started": "2026-01-01T00:00:12Z", "finished": "2026-01-01T00:00:20Z",
                                "output": "setting up\nno collector"}]},
                           {"name": "node-2", "tasks": [{"task": "netconfig", "state": "skipped",
                                                         "reason": "condition false"}]}]}}


def test_an_action_run_is_a_tree_per_replica_with_the_application_tasks_first() -> None:
    view = action_run_view(action_run(final=False), NOW)
    assert [g["label"] for g in view["groups"]] == [APP_GROUP, "tier-0", "tier-1"]
    assert [t["task"] for t in view["groups"][0]["tasks"]] == ["prepare", "register"]  # register: not reached
    tier1 = view["groups"][2]
    assert tier1["state"] == "running" and tier1["tasks"][0]["attempts"] == 2
    # a running instance's duration runs to now; a finished one's is its own
    assert tier1["tasks"][0]["duration"] == 106.0
    assert view["groups"][1]["tasks"][0]["duration"] == 66.0 and view["groups"][0]["tasks"][0]["duration"] == 0.2
    assert view["progress"] == "3/5" and view["final"] is False and view["duration"] == 120.0
    # each instance names what the operator's ActionRun output route needs; a task not reached has none yet
    assert view["wholeOutput"] is True
    assert tier1["tasks"][0]["outputRef"] == {"plural": "actionruns", "step": "s1", "target": "tier-1"}
    assert view["groups"][0]["tasks"][0]["outputRef"] == {"plural": "actionruns", "step": "s0", "target": None}
    assert view["groups"][0]["tasks"][1]["outputRef"] is None


def test_a_failed_action_run_names_its_failure_and_keeps_the_output_as_data() -> None:
    view = run_view(action_run(final=True), NOW)
    assert view["final"] is True and view["failedTask"] == "deploy@tier-1" and view["duration"] == 111.0
    failed = view["groups"][2]["tasks"][0]
    assert failed["state"] == "failure" and failed["exitCode"] == 3 and failed["reason"] == "script exited with code 3"
    assert failed["output"] == XSS  # escaping is the page's: the data stays what the task printed
    assert failed["id"] == "deploy@tier-1"


def test_a_graph_run_is_a_tree_per_node_anchors_last_with_what_finds_each_output() -> None:
    view = graph_run_view(graph_run(), NOW)
    assert [(g["label"], g["state"]) for g in view["groups"]] == [
        ("node-1", "failure"), ("node-2", "skipped"), ("(anchors)", "noop")]
    collector = view["groups"][0]["tasks"][1]
    assert collector["outputRef"] == {"task": "collector", "node": "node-1", "type": "default"}
    assert collector["duration"] == 8.0 and collector["reason"] == "exit code 3"
    assert view["groups"][2]["tasks"][0]["outputRef"]["node"] is None
    assert view["groups"][1]["tasks"][0]["duration"] is None  # never started
    assert view["wholeOutput"] is True and view["final"] is True
    assert view["taskStates"] == {"netconfig": "success", "collector": "failure", "deploy_end": "noop"}


def test_a_run_given_two_types_names_no_type_and_an_unknown_kind_is_refused() -> None:
    run = graph_run()
    run["spec"]["graphs"] = [{"type": "default"}, {"type": "upgrade"}]
    assert graph_run_view(run, NOW)["groups"][0]["tasks"][0]["outputRef"]["type"] is None
    with pytest.raises(ValueError, match="kind: an ActionRun or a GraphRun, not 'App'"):
        run_view({"kind": "App"}, NOW)


def test_a_run_with_no_status_yet_is_pending_and_empty() -> None:
    view = run_view({"kind": "GraphRun", "metadata": {"name": "x"}, "spec": {}}, NOW)
    assert (view["state"], view["groups"], view["timeline"]["rows"], view["duration"]) == ("Pending", [], [], None)


def test_durations_and_group_states() -> None:
    assert duration("2025-01-01T12:00:00Z", "2025-01-01T12:00:01.500+00:00", NOW) == 1.5
    assert duration("2025-01-01T12:00:02Z", "2025-01-01T12:00:01Z", NOW) == 0.0  # clocks disagree: never negative
    assert duration(None, "2025-01-01T12:00:01Z", NOW) is None and duration("junk", None, NOW) is None
    assert group_state(["success", "failure", "running"]) == "failure"
    assert group_state(["success", "skipped"]) == "success" and group_state([]) == "pending"


def test_a_service_instances_transfers_are_the_action_runs_of_its_app_newest_first() -> None:
    instance = {"metadata": {"name": "db1"}, "status": {"app": "db1"}}
    runs = [{"metadata": {"name": n, "creationTimestamp": t}, "spec": {"app": a, "action": act},
             "status": {"state": s}} for n, t, a, act, s in (
                 ("db1-create", "2025-01-01T00:00:00Z", "db1", "create", "Succeeded"),
                 ("other-create", "2025-01-01T00:00:01Z", "other", "create", "Succeeded"),
                 ("db1-update-2", "2025-01-01T00:01:00Z", "db1", "update", "Running"))]
    assert [(r["name"], r["action"], r["state"]) for r in transfer_runs(instance, runs)] == [
        ("db1-update-2", "update", "Running"), ("db1-create", "create", "Succeeded")]


def test_a_real_failed_run_of_application_tasks_is_one_group_the_failure_named_by_its_task() -> None:
    """The status the operator wrote for test_apps' `fail` action (captured from an e2e run, trimmed)."""
    replica = {"attempts": 1, "target": "", "startedAt": "2026-11-27T23:43:55.326Z",
               "finishedAt": "2026-11-27T23:43:55.374Z"}
    obj = {"kind": "ActionRun", "metadata": {"name": "f", "namespace": "ns"}, "spec": {"app": "demo", "action": "fail"},
           "status": {"state": "Failed", "failedTask": "boom", "startTime": "2026-11-27T23:43:52Z",
                      "endTime": "2026-11-27T23:43:55Z", "progressText": "1/2", "runLog": [
                          {"replicas": [{**replica, "exitCode": 0, "output": "fine", "state": "success"}],
                           "state": "success", "step": "ok", "task": "ok", "type": "exec"},
                          {"replicas": [{**replica, "exitCode": 3, "message": "script exited with code 3",
                                         "output": "about to fail", "state": "failure"}],
                           "state": "failure", "step": "boom", "task": "boom", "type": "exec"}]}}
    (group,) = run_view(obj, NOW)["groups"]
    assert (group["label"], group["state"]) == (APP_GROUP, "failure")
    assert [(t["id"], t["exitCode"], t["duration"]) for t in group["tasks"]] == [
        ("ok@(application)", 0, 0.048), ("boom@(application)", 3, 0.048)]
