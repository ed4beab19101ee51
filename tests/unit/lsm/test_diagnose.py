"""Diagnose (issue 31, item 8): the report assembled from an instance, its App and the App's runs; `stead
service diff` and `diagnose` as they print."""

from __future__ import annotations

import json
from typing import Any

from operators.calm.app import APP_UID_LABEL
from operators.calm.models import ACTIONRUN, APP
from operators.lsm import cli_diff
from operators.lsm.diagnose import diagnose, format_report


def entry(version: int, source: str, target: str, trigger: str, time: str, *, error: bool = False,
          message: str | None = None) -> dict[str, Any]:
    return {"from": source, "to": target, "trigger": trigger, "version": version, "time": time, "error": error,
            **({"message": message} if message else {})}


LOG = [
    entry(1, None, "start", "create", "2026-01-01T10:00:00Z"),  # type: ignore[arg-type]
    entry(2, "start", "acknowledged", "auto", "2026-01-01T10:00:00Z"),
    entry(4, "creating", "up", "resource_based", "2026-01-01T10:00:05Z"),
    entry(5, "up", "update_start", "on_update", "2026-01-01T10:01:00Z"),
    entry(6, "update_start", "update_rejected", "auto", "2026-01-01T10:01:00Z", error=True,
          message="update validation; validation failed: spec.attributes.who: 'Bad1' does not match '[a-z]+'"),
    entry(7, "update_rejected", "up", "api_set_state", "2026-01-01T10:02:00Z"),
    entry(10, "update_inprogress", "update_failed", "resource_based", "2026-01-01T10:03:09Z", error=True,
          message="update deployed; the App failed: App db-1: update action failed at apply: exit 1"),
]


def run(name: str, action: str, state: str, end: str, task: str = "apply") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {APP_UID_LABEL: "app-uid"}},
            "spec": {"app": "db-1", "action": action},
            "status": {"state": state, "endTime": end, "failedTask": task, "reason": "exit 1",
                       "runLog": [{"task": task, "type": "exec", "state": "failure" if state == "Failed" else "success",
                                   "replicas": [{"target": "", "state": "failure", "message": "exit code 1",
                                                 "output": "checking boom\nboom is not a greeting\n"}]}]}}


def instance(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "db-1", "namespace": "shop"},
            "status": {"state": "update_failed", "version": 10, "app": "db-1", "log": LOG, **status}}


def test_the_report_walks_failures_newest_first_pairing_a_failed_deployment_with_its_run() -> None:
    runs = [run("db-1-update-3", "update", "Failed", "2026-01-01T10:03:08Z"),
            run("db-1-update-2", "update", "Succeeded", "2026-01-01T10:01:30Z"),
            run("db-1-check", "check", "Failed", "2026-01-01T10:02:30Z", task="probe")]
    report = diagnose(instance(), {"metadata": {"name": "db-1"}}, runs)
    kinds = [(f.kind, f.version, f.state) for f in report.findings]
    assert kinds == [("realization", 10, "update_failed"), ("run", 7, "up"), ("validation", 6, "update_rejected")]
    deployment, user_action, validation = report.findings
    assert deployment.run == "db-1-update-3" and deployment.task == "apply"
    assert "failing task apply: exit code 1 (output: boom is not a greeting)" in deployment.failure
    assert deployment.where[0] == "stead actionrun logs db-1-update-3 -n shop"
    assert user_action.run == "db-1-check" and user_action.trigger == "action check" and "at probe" in \
        user_action.failure
    assert "'Bad1' does not match" in validation.failure and validation.trigger == "auto"
    text = format_report(report)
    assert text.index("update_failed  resource_based") < text.index("update_rejected  auto")
    assert "failing task: apply (ActionRun db-1-update-3)" in text


def test_a_refused_request_and_a_stall_of_another_kind_are_reported_too() -> None:
    refused = {"trigger": "api_set_state", "reason": "StaleVersion", "message": "The given current version (3) ...",
               "generation": 4, "time": "2026-01-01T10:05:00Z"}
    report = diagnose(instance(log=[], refused=refused), None, [])
    assert [(f.kind, f.failure.split(":")[0]) for f in report.findings] == [("refused", "StaleVersion")]
    stalled = {"type": "Stalled", "status": "True", "reason": "EntityNotReady",
               "message": "ServiceEntity x is not Ready",
               "lastTransitionTime": "2026-01-01T10:06:00Z"}
    report = diagnose(instance(log=[], conditions=[stalled]), None, [])
    assert [f.kind for f in report.findings] == ["stalled"]


def test_an_instance_without_failures_says_so() -> None:
    report = diagnose(instance(log=LOG[:4]), None, [])
    assert report.findings == [] and "no failures recorded" in format_report(report)
    assert json.loads(json.dumps(report.as_dict()))["instance"] == "db-1"


def test_the_clis_kind_names_agree_with_the_calm_kinds() -> None:
    names = (cli_diff.APPS, cli_diff.ACTIONRUNS, cli_diff.APP_UID_LABEL)
    assert names == (APP.plural, ACTIONRUN.plural, APP_UID_LABEL)


def test_diff_prints_how_to_approve_what_runs_and_what_changes() -> None:
    obj = {"metadata": {"name": "db-1", "namespace": "shop"}, "status": {"diff": {
        "status": "pending", "version": 6, "state": "update_acknowledged", "requests": ["update_designed"],
        "transfers": ["update_acknowledged -> update_designed (api_set_state)"], "target": "update_inprogress",
        "action": "update", "app": "db-1", "actionRun": "db-1-update-3", "message": "...",
        "attributes": [{"name": "who", "old": "two", "new": "three"}],
        "inputs": [{"variable": "who", "old": "two", "new": "three"},
                   {"variable": "token", "old": "********", "new": "********", "secret": True}]}}}
    text = cli_diff.format_diff(obj)
    assert "stead service set-state db-1 update_designed -n shop" in text
    assert "app action:  update (ActionRun db-1-update-3) on App db-1" in text
    assert any(line.split() == ["who", "two", "three"] for line in text.splitlines())
    assert any(line.split() == ["token", "(secret)", "********", "********"] for line in text.splitlines())
    applied = {"metadata": {"name": "db-1"}, "status": {"diff": {**obj["status"]["diff"], "status": "applied",
                                                                   "appliedVersion": 9}}}
    assert "applied at version 9" in cli_diff.format_diff(applied)
    assert "no candidate set waits" in cli_diff.format_diff({"metadata": {"name": "db-1"}, "status": {}})
