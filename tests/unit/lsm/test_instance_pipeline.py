"""The ServiceInstance pipeline against the shared fake API: triggers taken in once, the App launched,
updated (its update action), purged, its outcomes followed; refusals after admission recorded; what
settles Ready and what Stalled."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.lsm.converge import POLL_SECONDS, update_run_name
from operators.runtime.core.pipeline import PermanentError, TemporaryError
from operators.runtime.kube.client import ApiError
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import (
    APPS,
    INSTANCES,
    RUNS,
    World,
    body,
    greeter_entity,
    instance_spec,
    make_world,
    observed,
    ready_app,
    requested,
    run,
    up,
    updated,
    walk,
)


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    w = make_world(tmp_path, kube)
    w.catalog()
    return w


def test_creation_launches_the_app_with_the_active_set_and_waits_for_it(world: World) -> None:
    obj, outcome = run(world, observed(instance_spec()))
    assert isinstance(outcome.error, TemporaryError) and outcome.error.waiting
    assert outcome.error.delay == POLL_SECONDS and outcome.phase == "Realizing"
    status = obj.status
    assert walk(status) == [(None, "start", "create"), ("start", "acknowledged", "auto"),
                            ("acknowledged", "creating", "auto")]
    assert status["state"] == "creating" and status["app"] == "db-1" and status["version"] == 3
    assert status["activeAttributes"] == {"name": "db-1", "who": "one", "region": "eu"}
    assert "candidateAttributes" not in status  # promoted
    app = world.kube.objects[f"{APPS}/db-1"]
    assert app["spec"] == {"blueprint": "greeter", "inputs": {"who": "one", "region": "eu"}}
    assert app["metadata"]["ownerReferences"] == [{"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
                                                   "name": "db-1", "uid": "u-db-1", "controller": True}]
    assert app["metadata"]["labels"] == {"stead.dev/service-instance": "db-1"}
    assert world.events.reasons() == ["Transfer"] * 3  # one Event per transfer
    # looked at again while the App runs: nothing taken twice, nothing written
    again, outcome = run(world, obj)
    assert again.status == obj.status and isinstance(outcome.error, TemporaryError)
    assert world.kube.count("POST", "/apps") == 1 and len(world.events.events) == 3


def test_the_apps_success_moves_the_instance_up_with_the_r_attributes_it_set(world: World) -> None:
    obj = up(world)
    status = obj.status
    assert walk(status, 3) == [("creating", "up", "resource_based")]
    assert status["activeAttributes"]["address"] == "host-one" and status["modelState"] == "active"
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready == {"Ready": "True", "Reconciling": "False", "Stalled": "False"} and status["phase"] == "Provisioned"
    again, outcome = run(world, obj)  # a recheck: the repair transfer up -> up changes nothing and is not taken
    assert outcome.error is None and again.status == obj.status


def test_an_update_reaches_the_app_as_new_inputs_and_runs_its_update_action(world: World) -> None:
    obj, outcome = run(world, updated(up(world), who="two"))
    assert isinstance(outcome.error, TemporaryError) and outcome.error.reason == "WaitingForApp"
    assert "update action runs: ActionRun db-1-update-2" in outcome.error.message
    assert walk(obj.status, 4) == [("up", "update_start", "on_update"), ("update_start", "update_acknowledged", "auto"),
                                   ("update_acknowledged", "update_inprogress", "auto")]
    app = world.kube.objects[f"{APPS}/db-1"]
    assert app["spec"]["inputs"] == {"who": "two", "region": "eu"} and app["metadata"]["generation"] == 2
    run_body = world.kube.objects[f"{RUNS}/{update_run_name('db-1', 2)}"]
    assert run_body["spec"] == {"app": "db-1", "action": "update"}
    # the App's own pipeline observes the new inputs; the run succeeds
    ready_app(world.kube)
    run_body["status"] = {"state": "Succeeded"}
    obj, outcome = run(world, obj)
    assert outcome.error is None and obj.status["state"] == "up"
    assert obj.status["activeAttributes"]["who"] == "two" and obj.status["rollbackAttributes"]["who"] == "one"


def test_an_update_action_that_fails_leaves_the_instance_stalled_with_the_ways_out(world: World) -> None:
    obj, _ = run(world, updated(up(world), who="two"))
    ready_app(world.kube)
    world.kube.objects[f"{RUNS}/db-1-update-2"]["status"] = {"state": "Failed", "failedTask": "apply",
                                                               "reason": "exited with code 1"}
    obj, outcome = run(world, obj)
    assert obj.status["state"] == "update_failed"
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "DeploymentFailed"
    assert "update action failed at apply: exited with code 1" in outcome.error.message
    assert "state request rollback [rollback]" in outcome.error.message  # the way out is shown
    assert obj.status["phase"] == "Failed"  # what is true now: not Realizing, not Provisioned
    assert {c["type"]: c["status"] for c in obj.status["conditions"]}["Ready"] == "False"
    assert world.events.events[-1][:3] == ("db-1", "Warning", "TransferError")
    # roll back: the previous set goes to the App again
    obj, outcome = run(world, requested(obj, "rollback"))
    assert obj.status["state"] == "rollback" and obj.status["stateRequest"]["target"] == "rollback"
    assert world.kube.objects[f"{APPS}/db-1"]["spec"]["inputs"]["who"] == "one"
    assert f"{RUNS}/db-1-update-3" in world.kube.objects


def test_an_app_without_an_update_action_is_converged_once_it_observed_its_inputs(world: World) -> None:
    obj = up(world)
    snapshot = world.kube.objects[f"{APPS}/db-1"]["status"]["snapshot"]
    del snapshot["spec"]["actions"]
    obj, outcome = run(world, updated(obj, who="two"))
    assert isinstance(outcome.error, TemporaryError)
    assert outcome.error.message == "App db-1: taking the new inputs (its Blueprint has no update action)"
    assert world.kube.count("POST", "/actionruns") == 0
    ready_app(world.kube)
    del world.kube.objects[f"{APPS}/db-1"]["status"]["snapshot"]["spec"]["actions"]
    obj, outcome = run(world, obj)
    assert outcome.error is None and obj.status["state"] == "up"


def test_an_update_failing_validation_is_rejected_and_set_state_clears_its_candidate(world: World) -> None:
    obj, outcome = run(world, updated(up(world), who="Bad1"))
    assert obj.status["state"] == "update_rejected"
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "ValidationFailed"
    assert obj.status["phase"] == "Rejected"
    assert obj.status["validationProblems"] == ["spec.attributes.who (Blueprint variable who): 'Bad1' does not match "
                                                "'[a-z]+'"]
    assert world.kube.objects[f"{APPS}/db-1"]["metadata"]["generation"] == 1  # the App never saw it
    obj, outcome = run(world, requested(obj, "up"))
    assert outcome.error is None and obj.status["state"] == "up"
    assert "candidateAttributes" not in obj.status and obj.status["activeAttributes"]["who"] == "one"


def test_a_state_request_refused_after_admission_is_recorded_and_handled_once(world: World) -> None:
    obj = up(world)
    stale = requested(obj, "up", version=3)  # the webhook was bypassed (or the instance moved on meanwhile)
    obj, outcome = run(world, stale)
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "StaleVersion"
    assert obj.status["phase"] == "Refused"
    assert obj.status["stateRequest"] == {"target": "up", "currentVersion": 3}
    assert obj.status["refused"]["trigger"] == "api_set_state" and obj.status["refused"]["generation"] == 2
    assert obj.status["version"] == 4
    again, outcome = run(world, obj)  # the same spec seen again: not taken in twice
    assert again.status == obj.status


def test_a_creation_that_fails_validation_shows_phase_rejected_and_ready_false(world: World) -> None:
    obj, outcome = run(world, observed(instance_spec(who="Bad1")))
    assert walk(obj.status) == [(None, "start", "create"), ("start", "rejected", "auto")]
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "ValidationFailed"
    conditions = {c["type"]: c["status"] for c in obj.status["conditions"]}
    assert (obj.status["phase"], conditions["Ready"], conditions["Stalled"]) == ("Rejected", "False", "True")
    assert f"{APPS}/db-1" not in world.kube.objects
    fixed, outcome = run(world, updated(obj, who="two"))  # fixed by an update: Realizing again, then Provisioned
    assert fixed.status["phase"] == "Realizing" and fixed.status["state"] == "creating"


def test_an_update_refused_after_admission_is_not_retried_at_the_same_generation(world: World) -> None:
    obj = updated(up(world), region="us")  # rw: refused, by the webhook normally
    obj, outcome = run(world, obj)
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "ImmutableAttribute"
    assert obj.status["refused"]["trigger"] == "on_update" and obj.status["clientAttributes"]["region"] == "eu"
    again, _ = run(world, obj)
    assert again.status == obj.status
    fixed, outcome = run(world, updated(obj, region="eu", who="two"))  # the client's next write
    assert fixed.status["state"] == "update_inprogress" and "refused" not in fixed.status


def test_an_entity_without_realization_is_up_in_the_first_reconcile(world: World) -> None:
    world.put("ServiceEntity", "plain", greeter_entity(realized=False))
    obj, outcome = run(world, observed(instance_spec(entity="plain")))
    assert outcome.error is None and obj.status["state"] == "up" and "app" not in obj.status
    assert world.kube.count("POST") == 0


def test_an_app_the_blueprint_refuses_is_a_failed_deployment(world: World) -> None:
    world.kube.fail_with(ApiError(422, "spec.inputs.who: required"), "POST", "/apps")
    obj, outcome = run(world, observed(instance_spec()))
    assert obj.status["state"] == "failed" and isinstance(outcome.error, PermanentError)
    assert "App db-1 not launched: spec.inputs.who: required" in outcome.error.message


def test_a_failed_create_action_is_a_failed_deployment(world: World) -> None:
    obj, _ = run(world, observed(instance_spec()))
    ready_app(world.kube, state="error", stalled="create run db-1-create failed: publish: exited with code 2")
    obj, outcome = run(world, obj)
    assert obj.status["state"] == "failed" and isinstance(outcome.error, PermanentError)
    assert outcome.error.reason == "DeploymentFailed" and "exited with code 2" in outcome.error.message


def test_an_app_of_the_same_name_that_is_not_the_instances_stalls_it(world: World) -> None:
    world.kube.add(f"{APPS}/db-1", {"spec": {"blueprint": "other"}})
    obj, outcome = run(world, observed(instance_spec()))
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "AppConflict"
    assert obj.status["state"] == "creating"  # the creation itself is kept


def test_a_missing_entity_stalls_naming_what_exists(world: World) -> None:
    obj, outcome = run(world, observed(instance_spec(entity="nope")))
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "EntityNotFound"
    assert "no ServiceEntity 'nope' in namespace ns (ServiceEntities here: greeter)" in outcome.error.message
    assert "state" not in obj.status


def test_an_entity_ready_on_the_server_but_not_yet_in_the_store_is_used(tmp_path: Path, kube: FakeApi) -> None:
    w = make_world(tmp_path, kube)
    w.put("Blueprint", "greeter", {}, {"state": "Active"})
    kube.add(f"{INSTANCES.rsplit('/', 1)[0]}/serviceentities/plain", {
        "metadata": {"generation": 2}, "spec": greeter_entity(realized=False),
        "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}})
    obj, outcome = run(w, observed(instance_spec(entity="plain")))
    assert outcome.error is None and obj.status["state"] == "up"


def test_others_are_listed_when_the_engine_needs_them_and_the_older_keeps_an_identity(world: World) -> None:
    older = observed({"entity": "greeter", "attributes": {"name": "db-1", "who": "zero", "region": "eu"}},
                     name="db-0")
    world.kube.add(f"{INSTANCES}/db-0", body(older, created="2025-01-01T00:00:00Z"))
    mine = observed(instance_spec())
    world.kube.add(f"{INSTANCES}/db-1", body(mine, created="2025-01-01T00:00:01Z"))
    obj, outcome = run(world, mine)
    # the creation asked (one list); the older instance holds db-1: the creation is refused, as the webhook would
    assert world.kube.count("GET", "/serviceinstances") == 1
    assert "state" not in obj.status
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "DuplicateIdentity"
    assert outcome.error.message == ("spec.attributes.name: service identity name=db-1 is already used by service "
                                     "instance db-0")


def test_a_younger_instance_does_not_take_an_older_ones_identity(world: World) -> None:
    mine = observed(instance_spec())
    world.kube.add(f"{INSTANCES}/db-1", body(mine, created="2025-01-01T00:00:00Z"))
    younger = observed({"entity": "greeter", "attributes": {"name": "db-1", "who": "x", "region": "eu"}},
                       name="db-9")
    world.kube.add(f"{INSTANCES}/db-9", body(younger, created="2025-01-01T00:00:05Z"))
    obj, _ = run(world, mine)
    assert obj.status["state"] == "creating"  # the younger one does not count against the older
    up_again, _ = run(world, obj)
    lists = world.kube.count("GET", "/serviceinstances")
    run(world, up_again)
    assert world.kube.count("GET", "/serviceinstances") == lists  # nothing validated: no list


def test_a_deleted_state_reached_without_a_delete_makes_the_object_go(world: World) -> None:
    world.put("ServiceEntity", "basic", greeter_entity({"builtin": "testing_basic_lifecycle"}, realized=False))
    spec = instance_spec(entity="basic", who=5)  # who must be a string: validation fails -> rejected (deleted)
    obj, outcome = run(world, observed(spec))
    assert obj.status["state"] == "rejected" and obj.status["deleted"] is True
    assert isinstance(outcome.error, TemporaryError) and outcome.error.reason == "Terminated"
    assert world.kube.count("DELETE") == 0  # first its status says so (the delete webhook lets it go then)
    world.kube.add(f"{INSTANCES}/db-1", body(obj))
    obj, outcome = run(world, obj, start="Realizing")
    assert world.kube.count("DELETE", "/serviceinstances/db-1") == 1


def test_only_the_create_and_update_actions_are_the_deployment(world: World) -> None:
    obj = up(world)
    app = world.kube.objects[f"{APPS}/db-1"]
    app["status"].update(state="error", failure={"run": "greet-1", "action": "greet", "reason": "boom"})
    again, outcome = run(world, obj)  # a user action failed on the App: not the deployment's failure
    assert outcome.error is None and again.status == obj.status
    # an App whose create failed, given new inputs, has still never been deployed (no update action here)
    del app["status"]["snapshot"]["spec"]["actions"]
    app["status"]["failure"] = {"run": "db-1-create", "action": "create", "reason": "exited with code 2"}
    obj, _ = run(world, updated(obj, who="two"))
    ready_app(world.kube, state="error")
    world.kube.objects[f"{APPS}/db-1"]["status"]["snapshot"]["spec"].pop("actions")
    world.kube.objects[f"{APPS}/db-1"]["status"]["failure"] = {"run": "db-1-create", "action": "create",
                                                                "reason": "exited with code 2"}
    obj, outcome = run(world, obj)
    assert obj.status["state"] == "update_failed" and isinstance(outcome.error, PermanentError)
    assert "its create action failed: exited with code 2" in outcome.error.message


def test_an_instance_looks_at_its_app_less_often_the_longer_it_waits() -> None:
    from datetime import UTC, datetime

    from operators.lsm.converge import POLL_MAX_SECONDS, POLL_SECONDS, poll_delay

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def waiting_since(stamp: str) -> dict[str, object]:
        return {"conditions": [{"type": "Reconciling", "status": "True", "lastTransitionTime": stamp}]}

    assert poll_delay({}, now) == POLL_SECONDS
    assert poll_delay(waiting_since("2026-01-01T12:00:00Z"), now) == POLL_SECONDS
    assert poll_delay(waiting_since("2026-01-01T11:59:20Z"), now) == 10.0  # waited 40 s: a quarter of it
    assert poll_delay(waiting_since("2026-01-01T11:00:00Z"), now) == POLL_MAX_SECONDS
    assert poll_delay(waiting_since("garbage"), now) == POLL_SECONDS
