"""ServiceInstance admission: the engine on CREATE, UPDATE and DELETE, refusing with its code and message;
what cannot be judged yet is let through (the pipeline stalls on it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from operators.lsm import Refused
from operators.runtime.core.kinds import Refusal
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import INSTANCES, NS, World, body, instance_spec, make_world, observed

UP: dict[str, Any] = {
    "state": "up", "version": 4,
    "activeAttributes": {"name": "db-1", "who": "one", "region": "eu", "address": "host-one"},
    "clientAttributes": {"name": "db-1", "who": "one", "region": "eu"},
}


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    w = make_world(tmp_path, kube)
    w.catalog()
    return w


def refused(world: World, operation: str, spec: dict[str, Any] | None, old: dict[str, Any] | None = None,
            name: str = "db-1") -> Refusal:
    with pytest.raises(Refusal) as caught:
        asyncio.run(world.admit(operation, spec, old, name))
    return caught.value


def old(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return body(observed({**instance_spec(), **spec}, status if status is not None else UP))


def with_attributes(**attributes: Any) -> dict[str, Any]:
    return {**instance_spec(), "attributes": {**instance_spec()["attributes"], **attributes}}


def test_a_creation_with_a_read_only_or_unknown_attribute_is_refused(world: World) -> None:
    refusal = refused(world, "CREATE", instance_spec(address="x", colour="red"))
    assert isinstance(refusal, Refused) and refusal.code == 422 and refusal.reason == "ReadOnlyAttribute"
    assert "spec.attributes.address: read-only (modifier r)" in refusal.message
    assert "spec.attributes.colour: not an attribute of service entity greeter" in refusal.message


def test_a_creation_without_the_identity_or_with_one_in_use_is_refused(world: World) -> None:
    spec = instance_spec()
    del spec["attributes"]["name"]
    assert refused(world, "CREATE", spec).message == "spec.attributes.name: required: it is the service identity"
    world.kube.add(f"{INSTANCES}/db-0", body(observed(instance_spec(), name="db-0")))
    duplicate = refused(world, "CREATE", instance_spec())
    assert duplicate.code == 409 and "name=db-1 is already used by service instance db-0" in duplicate.message


def test_a_valid_creation_and_one_whose_entity_does_not_exist_yet_pass(world: World) -> None:
    asyncio.run(world.admit("CREATE", instance_spec()))
    asyncio.run(world.admit("CREATE", instance_spec(entity="later")))  # GitOps order is free: it waits, Stalled


def test_an_update_from_a_stale_version_is_refused_with_inmantas_message(world: World) -> None:
    refusal = refused(world, "UPDATE", {**with_attributes(who="two"), "currentVersion": 3}, old())
    assert refusal.code == 409
    assert refusal.message == ("The given current version (3) doesn't match the actual current version (4) of "
                               "service instance db-1")


def test_an_update_of_an_rw_attribute_or_in_a_state_without_on_update_is_refused(world: World) -> None:
    rw = refused(world, "UPDATE", with_attributes(region="us"), old())
    assert rw.code == 422 and rw.message == ("spec.attributes.region: set at creation only (modifier rw); rw+ "
                                             "attributes may change")
    creating = refused(world, "UPDATE", with_attributes(who="two"), old({**UP, "state": "creating"}))
    assert creating.code == 409
    assert creating.message.startswith('service instance db-1 in state "creating" cannot be updated: the state has '
                                       "no on_update transfer (states that allow an update: ")
    asyncio.run(world.admit("UPDATE", with_attributes(who="two"), old()))  # rw+ in up: fine


def test_one_request_at_a_time_and_the_entity_never_changes(world: World) -> None:
    both = {**with_attributes(who="two"), "stateRequest": {"target": "up", "currentVersion": 4}}
    assert refused(world, "UPDATE", both, old()).message.startswith("spec: one request at a time")
    moved = refused(world, "UPDATE", {**instance_spec(), "entity": "other"}, old())
    assert moved.code == 422 and moved.message.startswith("spec.entity: cannot change")


def test_a_state_request_without_a_matching_transfer_or_stale_is_refused(world: World) -> None:
    nowhere = refused(world, "UPDATE", {**instance_spec(), "stateRequest": {"target": "rollback",
                                                                            "currentVersion": 4}}, old())
    assert nowhere.code == 409 and 'cannot be set to "rollback"' in nowhere.message
    unknown = refused(world, "UPDATE", {**instance_spec(), "stateRequest": {"target": "nope", "currentVersion": 4}},
                      old())
    assert unknown.code == 422 and unknown.message.startswith('stateRequest.target: "nope" is not a state')
    rejected = {**UP, "state": "update_rejected", "candidateAttributes": {"who": "Bad1"}}
    asyncio.run(world.admit("UPDATE", {**instance_spec(), "stateRequest": {"target": "up", "currentVersion": 4}},
                            old(rejected)))
    # a request already taken in asks for nothing
    taken = {**rejected, "stateRequest": {"target": "up", "currentVersion": 2}}
    asyncio.run(world.admit("UPDATE", {**instance_spec(), "stateRequest": {"target": "up", "currentVersion": 2}},
                            old(taken, stateRequest={"target": "up", "currentVersion": 2})))


def test_a_delete_is_refused_where_the_state_has_no_on_delete_transfer(world: World) -> None:
    rejected = {**UP, "state": "update_rejected"}
    refusal = refused(world, "DELETE", None, old(rejected))
    assert refusal.code == 409 and refusal.message.startswith(
        'service instance db-1 in state "update_rejected" cannot be deleted: the state has no on_delete transfer '
        "(states that allow a delete: ")
    asyncio.run(world.admit("DELETE", None, old()))  # up has one


@pytest.mark.parametrize("case", ["never created", "deleted", "delete taken", "namespace going", "entity gone",
                                  "being deleted"])
def test_a_delete_nothing_can_judge_goes(world: World, case: str) -> None:
    status: dict[str, Any] = {**UP, "state": "update_rejected"}
    obj = old(status)
    if case == "never created":
        obj = old({})
    elif case == "deleted":
        obj = old({**status, "state": "terminated", "deleted": True})
    elif case == "delete taken":
        obj = old({**status, "deleteRequested": True})
    elif case == "namespace going":
        world.kube.objects[f"/api/v1/namespaces/{NS}"]["status"]["phase"] = "Terminating"
    elif case == "entity gone":
        obj = old(status, entity="gone")
    else:
        obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    asyncio.run(world.admit("DELETE", None, obj))


def test_without_services_only_the_spec_is_checked(world: World) -> None:
    from operators.lsm.kinds import SERVICE_INSTANCE_KIND

    request = world.request("CREATE", instance_spec(address="x"))
    assert SERVICE_INSTANCE_KIND.admission is not None
    asyncio.run(SERVICE_INSTANCE_KIND.admission(request.__class__(**{**request.__dict__, "services": None})))
