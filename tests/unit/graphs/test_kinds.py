"""The DeploymentGraph and GraphRun kinds against an in-memory API server: admission, checks, planning."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators.environment.models import EnvironmentSpec
from operators.graphs import kinds, run
from operators.graphs.output import read_plan
from operators.graphs.planner import STATUS_INSTANCES
from operators.runtime.core import pipeline as engine
from operators.runtime.core.kinds import AdmissionRequest, Refusal
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext
from operators.runtime.engine.runs import RunSettings, paths_for
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi

NS = "team"


def shell(task_id: str, roles: list[str], **more: Any) -> dict[str, Any]:
    return {"id": task_id, "type": "shell", "roles": roles, "parameters": {"cmd": "true"}, **more}


def seed(api: FakeApi, ssh: bool = True) -> None:
    spec: dict[str, Any] = {"release": "r1", "nodes": [
        {"name": "ctl", "roles": ["controller"], "address": "10.0.0.2"},
        {"name": "cmp", "roles": ["compute"], "address": "10.0.0.3"}]}
    if ssh:
        spec["ssh"] = {"privateKey": {"name": "k", "key": "id"}, "knownHosts": {"name": "h", "key": "known_hosts"}}
    api.add(custom_path("environments", NS, "env"), {"spec": spec})
    api.add(f"/api/v1/namespaces/{NS}/secrets/h", {"data": {"known_hosts": "W2hdIGtleQo="}})
    api.add(custom_path("deploymentgraphs", NS, "rel"), {"metadata": {"creationTimestamp": "2025-01-01T00:00:00Z"},
                                                        "spec": {"release": "r1", "tasks": [
                                                            shell("db", ["controller"]),
                                                            shell("app", ["compute"], crossDepends=[{"name": "db"}])]}})


def ctx(api: FakeApi, tmp_path: Path, name: str = "gr", status: dict[str, Any] | None = None,
        **spec: Any) -> StepContext:
    body = {"kind": "GraphRun", "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1},
            "spec": {"environment": "env", "graphs": [{"type": "default"}], **spec}, "status": status or {}}
    services = SimpleNamespace(kube=api, runs=RunSettings(state_dir=tmp_path / "runs"))
    return StepContext(obj=Observed.from_body(body), facts={}, services=services)


def request(api: FakeApi, operation: str, spec: dict[str, Any], old: dict[str, Any] | None = None,
            name: str = "x") -> AdmissionRequest:
    return AdmissionRequest(operation=operation, namespace=NS, name=name, labels={}, spec=spec, old=old,
                            dry_run=False, services=SimpleNamespace(kube=api))


def test_a_second_graph_of_one_owner_and_type_is_refused_naming_the_first() -> None:
    api = FakeApi()
    seed(api)
    spec = {"release": "r1", "tasks": [shell("x", ["*"])]}
    with pytest.raises(Refusal) as refused:
        asyncio.run(kinds.graph_admission(request(api, "CREATE", spec)))
    assert refused.value.code == 409
    assert "DeploymentGraph rel is the 'default' graph of release/r1" in str(refused.value)
    asyncio.run(kinds.graph_admission(request(api, "CREATE", {**spec, "type": "other"})))  # another type: fine
    asyncio.run(kinds.graph_admission(request(api, "UPDATE", spec, name="rel")))  # itself: fine


def test_a_run_is_refused_while_another_runs_on_its_environment_and_only_abort_may_change() -> None:
    api = FakeApi()
    seed(api)
    api.add(custom_path("graphruns", NS, "busy"), {"spec": {"environment": "env"}, "status": {"state": "Running"}})
    api.add(custom_path("graphruns", NS, "done"), {"spec": {"environment": "env"}, "status": {"state": "Failed"}})
    with pytest.raises(Refusal) as refused:
        asyncio.run(run.admission(request(api, "CREATE", {"environment": "env", "graphs": [{}]})))
    assert refused.value.code == 409 and "GraphRun busy runs on environment env" in str(refused.value)
    asyncio.run(run.admission(request(api, "CREATE", {"environment": "other", "graphs": [{}]})))
    old = {"spec": {"environment": "env", "graphs": [{}]}}
    asyncio.run(run.admission(request(api, "UPDATE", {**old["spec"], "abort": True}, old)))
    with pytest.raises(Refusal) as changed:
        asyncio.run(run.admission(request(api, "UPDATE", {**old["spec"], "force": True}, old)))
    assert changed.value.code == 422 and str(changed.value).startswith("spec.force: ")


def test_init_needs_the_environment_and_its_ssh_access_unless_a_dry_run(tmp_path: Path) -> None:
    api = FakeApi()
    with pytest.raises(PermanentError) as missing:
        asyncio.run(run.validate(ctx(api, tmp_path)))
    assert missing.value.reason == "EnvironmentNotFound" and "spec.environment: no Environment 'env'" in str(
        missing.value.message)
    seed(api, ssh=False)
    with pytest.raises(PermanentError) as no_ssh:
        asyncio.run(run.validate(ctx(api, tmp_path)))
    assert no_ssh.value.reason == "NoSshAccess"
    assert asyncio.run(run.validate(ctx(api, tmp_path, dryRun=True)))["state"] == "Pending"


def test_a_dry_run_plans_from_the_merged_graph_and_ends_without_a_workflow_run(tmp_path: Path) -> None:
    api = FakeApi()
    seed(api)
    facts = asyncio.run(run.plan(ctx(api, tmp_path, dryRun=True)))
    # what it planned, not "0/2" beside Succeeded (a run that did nothing)
    assert facts["state"] == "Succeeded" and facts["plan"]["planned"] == 2
    assert facts["progress"] == "2 planned (dry run)"
    assert {(n["name"], t["task"], t["state"]) for n in facts["nodes"] for t in n["tasks"]} == {
        ("ctl", "db", "planned"), ("cmp", "app", "planned")}
    saved = read_plan(paths_for(ctx(api, tmp_path)).run_dir)
    assert saved is not None and len(saved["workflow"]["steps"]) == 2


def test_a_run_that_failed_at_init_shows_failed_not_planning(tmp_path: Path) -> None:
    """The PHASE column of a run that failed says so, whatever step ended it: a run that failed at Init once
    showed `Planning`, a failed one `Running`."""
    api = FakeApi()
    outcome = asyncio.run(engine.run(kinds.GRAPH_RUN_KIND.pipeline, ctx(api, tmp_path).obj, "Init",
                                     services=ctx(api, tmp_path).services))
    status = engine.compose_status(ctx(api, tmp_path).obj, outcome, "2026-01-01T00:00:00Z")
    assert (status["phase"], status["state"]) == ("Failed", "Failed")
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Ready", "False", "EnvironmentNotFound"), ("Reconciling", "False", "EnvironmentNotFound"),
        ("Stalled", "True", "EnvironmentNotFound")]


def test_a_graph_of_the_default_type_shows_its_type(tmp_path: Path) -> None:
    """spec.type's default is not written into the spec (the CRD has no defaults): the TYPE column reads the
    status, which the check fills."""
    api = FakeApi()
    body = {"kind": "DeploymentGraph", "metadata": {"name": "g", "namespace": NS, "uid": "u", "generation": 1},
            "spec": {"release": "r2", "tasks": [shell("x", ["*"])]}}
    step = StepContext(obj=Observed.from_body(body), facts={}, services=SimpleNamespace(kube=api))
    assert asyncio.run(kinds.check(step))["type"] == "default"
    assert [c.json_path for c in kinds.DEPLOYMENT_GRAPH_KIND.columns if c.name == "Type"] == [".status.type"]


def test_a_failed_run_is_not_all_done() -> None:
    saved = {"planned": {s: {"task": s, "state": "planned"} for s in ("a", "b", "c")}}
    status = {"steps": [{"step": "a", "state": "success"}, {"step": "b", "state": "failure"},
                        {"step": "c", "state": "aborted"}]}
    assert run._progress_text(saved, status, {}) == "1/3"  # was 3/3: a full bar for a failed run


def test_planning_problems_stall_the_run_naming_them(tmp_path: Path) -> None:
    api = FakeApi()
    seed(api)
    with pytest.raises(PermanentError) as failed:
        asyncio.run(run.plan(ctx(api, tmp_path, graphs=[{"type": "default", "nodes": ["nope"]}])))
    assert failed.value.reason == "PlanFailed" and "graphs[0].nodes: 'nope' is not a node" in failed.value.message
    assert failed.value.facts["state"] == "Failed"


def test_the_status_lists_a_bounded_number_of_instances_and_counts_the_rest() -> None:
    index = {f"d:t{i}:n": [f"t{i}", "n"] for i in range(STATUS_INSTANCES + 5)}
    planned = {sid: {"task": task, "state": "planned"} for sid, (task, _) in index.items()}
    records = {"d:t0:n": {"state": "failure", "message": "exit 3", "output": "x" * 10000, "attempts": 2}}
    nodes, omitted = run._instances_status(index, records, planned)
    assert omitted == 5 and sum(len(n["tasks"]) for n in nodes) == STATUS_INSTANCES
    first = nodes[0]["tasks"][0]
    assert first["state"] == "failure" and first["reason"] == "exit 3" and len(first["output"]) == 2048


def test_a_node_sits_at_its_first_role_and_its_fqdn() -> None:
    env = EnvironmentSpec.model_validate({"release": "r", "hierarchyLevels": ["role", "node", "rack"], "nodes": [
        {"name": "n1", "fqdn": "n1.example", "roles": ["controller", "mongo"]}]})
    assert run.node_point(env, env.nodes[0]) == (("role", "controller"), ("node", "n1.example"))
