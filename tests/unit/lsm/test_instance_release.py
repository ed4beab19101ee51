"""Deleting a ServiceInstance (its cleanup, behind the finalizer): the delete sent to the lifecycle once, the
App purged on the way to a deleted state, the object let go then; what keeps it, and what does not."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from operators.lsm.instance import release
from operators.runtime.core.pipeline import Observed, PermanentError, TemporaryError
from tests.unit.fakeapi import FakeApi, merge
from tests.unit.lsm.kindsupport import APPS, INSTANCES, NS, World, body, instance_spec, make_world, observed, up


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    w = make_world(tmp_path, kube)
    w.catalog()
    return w


def deleting(obj: Observed) -> Observed:
    return replace(obj, deleting=True, generation=obj.generation + 1)


def clean(world: World, obj: Observed) -> tuple[Observed, Any]:
    """One cleanup attempt; the status as the reconciler would write it on a failure (facts over the old)."""
    try:
        result = asyncio.run(release(world.step(obj)))
    except (TemporaryError, PermanentError) as error:
        return replace(obj, status=merge(dict(obj.status), error.facts)), error
    return obj, result


def test_the_delete_purges_the_app_then_lets_the_instance_go_in_a_deleted_state(world: World) -> None:
    obj = deleting(up(world))
    world.kube.add(f"{INSTANCES}/db-1", body(obj))
    obj, error = clean(world, obj)
    assert isinstance(error, TemporaryError) and error.waiting and error.reason == "DeletingApp"
    assert obj.status["state"] == "deleting" and obj.status["deleteRequested"] is True
    assert world.kube.count("DELETE", "/apps/db-1") == 1
    again, error = clean(world, obj)  # the App still there: the delete is not sent twice
    assert again.status == obj.status and isinstance(error, TemporaryError)
    assert [e for e in obj.status["log"] if e["trigger"] == "on_delete"] == [obj.status["log"][-1]]
    del world.kube.objects[f"{APPS}/db-1"]  # its delete action ran, its finalizer went
    _, result = clean(world, obj)
    assert result == {}
    written = world.kube.objects[f"{INSTANCES}/db-1"]["status"]
    assert written["state"] == "terminated" and written["deleted"] is True and "app" not in written
    assert world.events.events[-1][3] == "deleting -> terminated (resource_based, version 6): deleted"


def test_an_app_whose_delete_action_fails_keeps_the_instance_deleting(world: World) -> None:
    obj, _ = clean(world, deleting(up(world)))
    app = world.kube.objects[f"{APPS}/db-1"]
    app["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    app["status"]["conditions"] = [{"type": "Stalled", "status": "True", "message": "delete run failed: boom"}]
    _, error = clean(world, obj)
    assert isinstance(error, PermanentError) and error.reason == "NotDeleted"
    assert 'in state "deleting"' in error.message


def test_a_state_without_on_delete_keeps_the_object_until_a_state_request_moves_it(world: World) -> None:
    obj = up(world)
    rejected = {**obj.status, "state": "update_rejected", "candidateAttributes": {"who": "Bad1"}}
    obj = deleting(replace(obj, status=rejected))
    _, error = clean(world, obj)
    assert isinstance(error, PermanentError) and error.reason == "DeleteNotAllowed"
    assert "the instance stays (being deleted) until a state request moves it" in error.message
    assert world.kube.count("DELETE") == 0
    # the way out: a state request to up, which allows a delete; the cleanup takes both in order
    request = {"target": "up", "currentVersion": obj.status["version"]}
    obj, error = clean(world, replace(obj, spec={**obj.spec, "stateRequest": request}))
    assert [e["to"] for e in obj.status["log"][-2:]] == ["up", "deleting"]
    assert isinstance(error, TemporaryError) and world.kube.count("DELETE", "/apps/db-1") == 1


def test_in_a_namespace_being_deleted_nothing_keeps_an_instance(world: World) -> None:
    obj = up(world)
    world.kube.objects[f"/api/v1/namespaces/{NS}"]["status"]["phase"] = "Terminating"
    obj = deleting(replace(obj, status={**obj.status, "state": "update_rejected"}))
    _, result = clean(world, obj)
    assert result == {} and world.kube.count("DELETE", "/apps/db-1") == 1


def test_an_instance_whose_entity_is_gone_goes_with_its_app_and_a_warning(world: World) -> None:
    obj = up(world)
    obj = deleting(replace(obj, spec={**obj.spec, "entity": "gone"}))
    _, result = clean(world, obj)
    assert result == {} and world.kube.count("DELETE", "/apps/db-1") == 1
    assert world.events.events[-1][1:3] == ("Warning", "EntityNotFound")


def test_an_instance_never_created_or_already_deleted_goes_at_once(world: World) -> None:
    assert clean(world, deleting(observed(instance_spec())))[1] == {}
    assert clean(world, deleting(observed(instance_spec(), {"state": "terminated", "deleted": True})))[1] == {}
    assert world.kube.count() == 0
