"""Expert mode (issue 31, item 6): the pure operation (force a state, replace a set, destroy), taken once by
the pipeline with a log entry and an Event naming the user; refused at admission for a stale version or an
unknown state; the API server's policy and role, and the CLI's request."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from operators.lsm import Refused
from operators.lsm.expert import ALLOWED, NEW_REQUEST, SAME_USER, apply_expert, expert_policy, expert_role
from operators.lsm.models import ExpertRequest, ServiceInstanceSpec
from operators.runtime.core.kinds import Refusal
from operators.runtime.core.pipeline import TemporaryError
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import APPS, INSTANCES, World, body, make_world, run, up, walk
from tests.unit.lsm.support import FULL, at, context


def expert(**fields: Any) -> ExpertRequest:
    return ExpertRequest.model_validate({"user": "alice", "currentVersion": 5, **fields})


# --- the pure operation --------------------------------------------------------------------------


def test_set_state_forces_any_state_without_a_transfer_and_logs_the_user() -> None:
    status = at("update_failed", active=FULL)  # simple has no api_set_state transfer from here to failed
    outcome = apply_expert(context(), status, expert(operation="setState", state="failed", message="stuck"))
    after = outcome.status
    assert (after.state, after.version, after.model_state) == ("failed", 6, "active")
    assert after.active_attributes == FULL  # no operation on the sets
    [entry] = outcome.transfers
    assert (entry.from_, entry.to, entry.trigger, entry.user) == ("update_failed", "failed", "expert", "alice")
    assert entry.message == 'expert alice forced state "failed": stuck'
    assert after.log[-1] == entry and after.expert is not None and after.expert.state == "failed"


def test_edit_replaces_one_set_as_given_unvalidated_and_empty_removes_it() -> None:
    status = at("up", active=FULL, rollback={"name": "db-1", "port": 1})
    wrong_type = {**FULL, "port": "not-an-int"}  # expert mode does not validate: that is its point
    after = apply_expert(context(), status, expert(operation="editAttributes", set="active",
                                                   attributes=wrong_type)).status
    assert after.active_attributes == wrong_type and after.rollback_attributes == {"name": "db-1", "port": 1}
    assert after.state == "up" and after.log[-1].message == ("expert alice replaced the active attribute set "
                                                             "(attributes: name, port, region, tags)")
    cleared = apply_expert(context(), status, expert(operation="editAttributes", set="rollback", attributes={}))
    assert cleared.status.rollback_attributes is None and cleared.status.active_attributes == FULL


def test_destroy_marks_the_instance_destroyed_in_any_state() -> None:
    after = apply_expert(context(), at("update_inprogress"), expert(operation="destroy")).status
    assert after.destroyed is True and after.state == "update_inprogress" and after.version == 6
    assert after.log[-1].message == "expert alice destroyed the instance and its App without the lifecycle's delete"


@pytest.mark.parametrize(("status", "request_", "code", "reason", "text"), [
    (at("up", version=7), {"operation": "destroy"}, 409, "StaleVersion",
     "spec.expert.currentVersion: the given current version (5) doesn't match the actual current version (7)"),
    (at("up"), {"operation": "setState", "state": "nowhere"}, 422, "UnknownState",
     'spec.expert.state: "nowhere" is not a state of the lifecycle (states: start, acknowledged'),
    (at("terminated"), {"operation": "destroy"}, 409, "Deleted", "is gone"),
])
def test_what_cannot_be_done_is_refused_and_nothing_changes(status: Any, request_: dict[str, Any], code: int,
                                                            reason: str, text: str) -> None:
    with pytest.raises(Refused) as caught:
        apply_expert(context(), status, expert(**request_))
    assert (caught.value.code, caught.value.reason) == (code, reason) and text in str(caught.value)


def test_the_schema_names_the_field_an_operation_needs() -> None:
    with pytest.raises(ValueError, match="operation"):
        expert(operation="reboot")
    spec = ServiceInstanceSpec.model_validate({"entity": "e", "expert": {"operation": "editAttributes", "user": "a",
                                                                         "currentVersion": 1, "set": "active"}})
    assert spec.expert is not None and spec.expert.set_ == "active"  # the CEL rules (below) need `set` and more


def test_the_crd_requires_state_for_set_state_and_set_with_attributes_for_edit() -> None:
    rules = ExpertRequest.model_json_schema()["x-kubernetes-validations"]
    assert [r["rule"] for r in rules] == ["self.operation != 'setState' || has(self.state)",
                                         "self.operation != 'editAttributes' || (has(self.set) && "
                                         "has(self.attributes))"]


# --- the API server's policy and the role ----------------------------------------------------------


def test_the_policy_checks_the_verb_and_the_user_only_for_a_new_request() -> None:
    policy, binding = expert_policy()
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["serviceinstances"]  # not /status
    assert spec["matchConditions"] == [{"name": "sets-an-expert-request", "expression": NEW_REQUEST}]
    assert "oldObject.spec.expert != object.spec.expert" in NEW_REQUEST
    checks = [v["expression"] for v in spec["validations"]]
    assert checks == [ALLOWED, SAME_USER]
    assert ".resource('serviceinstances')" in ALLOWED and ".check('expert').allowed()" in ALLOWED
    assert "request.userInfo.username" in SAME_USER
    forbidden = spec["validations"][0]["messageExpression"]
    assert 'verb "expert" on resource "serviceinstances" in API group "stead.dev"' in forbidden
    assert binding["spec"] == {"policyName": "stead-service-expert", "validationActions": ["Deny"]}


def test_the_expert_role_grants_the_verb_alone_and_is_not_aggregated() -> None:
    role = expert_role()
    assert role["metadata"]["name"] == "stead-expert"
    assert not any(k.startswith("rbac.authorization.k8s.io/aggregate") for k in role["metadata"]["labels"])
    assert role["rules"] == [{"apiGroups": ["stead.dev"], "resources": ["serviceinstances"], "verbs": ["expert"]}]


def test_the_chart_and_the_kind_carry_the_same_policy() -> None:
    from operators.lsm.kinds import SERVICE_INSTANCE_KIND

    assert SERVICE_INSTANCE_KIND.cluster_objects is not None
    kinds = [obj["kind"] for obj in SERVICE_INSTANCE_KIND.cluster_objects()]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterRole"]
    chart = Path(__file__).parents[3] / "charts/stead/templates/rbac.yaml"
    assert "verbs: [expert]" in chart.read_text()


# --- the pipeline and admission ---------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    w = make_world(tmp_path, kube)
    w.catalog()
    return w


def with_expert(obj: Any, **fields: Any) -> Any:
    request = {"user": "alice", "currentVersion": obj.status["version"], **fields}
    return replace(obj, spec={**obj.spec, "expert": request}, generation=obj.generation + 1)


def test_the_pipeline_takes_a_request_once_with_an_event_naming_the_user(world: World) -> None:
    obj = up(world)
    events = len(world.events.events)
    obj, _ = run(world, with_expert(obj, operation="setState", state="update_rejected"))
    status = obj.status
    assert status["state"] == "update_rejected" and status["version"] == 5 and status["log"][-1]["user"] == "alice"
    assert world.events.events[events:] == [("db-1", "Warning", "ExpertMode",
                                             'expert alice forced state "update_rejected" (version 5)')]
    again, _ = run(world, obj)  # seen again: not taken twice
    assert again.status == obj.status


def test_a_forced_state_is_the_lifecycles_again(world: World) -> None:
    obj, _ = run(world, with_expert(up(world), operation="setState", state="failed"))
    # failed waits for the App's outcome: the App is fine, so the lifecycle takes the instance up again
    assert walk(obj.status, 4) == [("up", "failed", "expert"), ("failed", "up", "resource_based")]


def walk_has(status: dict[str, Any], trigger: str) -> bool:
    return any(e["trigger"] == trigger for e in status["log"])


def test_editing_the_active_set_reaches_the_app_as_new_inputs(world: World) -> None:
    obj = up(world)
    active = {**obj.status["activeAttributes"], "who": "expert"}
    obj, _ = run(world, with_expert(obj, operation="editAttributes", set="active", attributes=active))
    assert obj.status["activeAttributes"]["who"] == "expert"
    assert world.kube.objects[f"{APPS}/db-1"]["spec"]["inputs"]["who"] == "expert"


def test_a_stale_request_after_admission_is_recorded_as_refused_and_not_retried(world: World) -> None:
    obj = up(world)
    stale = replace(with_expert(obj, operation="destroy"), spec={**obj.spec, "expert": {
        "operation": "destroy", "user": "alice", "currentVersion": 1}})
    obj, _ = run(world, stale)
    assert obj.status["refused"]["trigger"] == "expert" and obj.status["refused"]["reason"] == "StaleVersion"
    assert "destroyed" not in obj.status and obj.status["expert"]["currentVersion"] == 1


def test_destroy_drops_the_app_and_the_object_and_the_cleanup_lets_it_go(world: World) -> None:
    obj = up(world)
    obj, outcome = run(world, with_expert(obj, operation="destroy", message="cleanup"))
    assert obj.status["destroyed"] is True and isinstance(outcome.error, TemporaryError)
    assert outcome.error.reason == "Destroyed" and world.kube.count("DELETE") == 0  # first its status says so
    world.kube.add(f"{INSTANCES}/db-1", body(obj))
    obj, _ = run(world, obj)
    assert world.kube.count("DELETE", "/apps/db-1") == 1 and world.kube.count("DELETE", "/serviceinstances/db-1") == 1
    assert not walk_has(obj.status, "on_delete")  # the lifecycle's delete never ran
    # the delete webhook lets a destroyed instance go in any state; its cleanup finishes at once
    asyncio.run(world.admit("DELETE", None, body(obj)))
    from operators.lsm.kinds import SERVICE_INSTANCE_KIND

    assert SERVICE_INSTANCE_KIND.cleanup is not None
    ctx = world.step(replace(obj, deleting=True))
    assert asyncio.run(SERVICE_INSTANCE_KIND.cleanup(ctx)) == {}


def test_admission_refuses_a_stale_request_an_unknown_state_and_two_requests_at_once(world: World) -> None:
    obj = up(world)
    old = body(obj)

    def refusal(**spec: Any) -> Refusal:
        with pytest.raises(Refusal) as caught:
            asyncio.run(world.admit("UPDATE", {**obj.spec, **spec}, old))
        return caught.value

    stale = refusal(expert={"operation": "destroy", "user": "alice", "currentVersion": 2})
    assert stale.code == 409 and "spec.expert.currentVersion" in str(stale)
    unknown = refusal(expert={"operation": "setState", "state": "x", "user": "alice", "currentVersion": 4})
    assert unknown.code == 422 and 'spec.expert.state: "x"' in str(unknown)
    both = refusal(expert={"operation": "destroy", "user": "alice", "currentVersion": 4},
                   attributes={**obj.spec["attributes"], "who": "two"})
    assert both.code == 422 and "one request at a time" in str(both)
    asyncio.run(world.admit("UPDATE", {**obj.spec, "expert": {"operation": "destroy", "user": "alice",
                                                               "currentVersion": 4}}, old))


# --- the CLI -----------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.sent: list[tuple[str, str, Any, str]] = []

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        self.sent.append((method, path, body, content_type))
        if path.endswith("/selfsubjectreviews"):
            return {"status": {"userInfo": {"username": "system:serviceaccount:ns:alice"}}}
        if path.endswith("/serviceentities/greeter"):
            return {"spec": {"attributes": [{"name": "who", "type": "string"}]}}
        return self.obj


def test_the_cli_signs_the_request_with_the_callers_name_and_replaces_it_whole(world: World) -> None:
    from operators.lsm import cli_expert

    obj = body(up(world))
    obj["spec"]["expert"] = {"operation": "setState", "state": "up", "user": "x", "currentVersion": 1}
    kube = Recorder(obj)
    args = argparse.Namespace(namespace="ns", id="db-1", set="active", attr=["who=expert"], message="fix")
    assert asyncio.run(cli_expert.edit(kube, args)) == 0
    method, path, patch, content_type = kube.sent[-1]
    assert (method, content_type) == ("PATCH", "application/json-patch+json") and path.endswith("/db-1")
    [op] = patch
    assert op["op"] == "add" and op["path"] == "/spec/expert"
    assert op["value"] == {"operation": "editAttributes", "set": "active", "user": "system:serviceaccount:ns:alice",
                           "currentVersion": 4, "message": "fix",
                           "attributes": {**obj["status"]["activeAttributes"], "who": "expert"}}
    assert json.dumps(op["value"])  # plain JSON
