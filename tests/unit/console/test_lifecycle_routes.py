"""The console's ServiceInstance routes (operators/console/views/lifecycle.py) on an in-memory API server: what
they read and write as the user, and what they refuse before writing anything."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.console.views import lifecycle
from operators.console.web import ConsoleCall, ConsoleError
from operators.runtime import ApiError, custom_path
from tests.unit.console.test_lifecycle_view import walked
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.support import CLIENT, ENTITY_SPEC

NS = "shop"
SI = custom_path("serviceinstances", NS, "db-1")


def seeded(kube: FakeApi, index: int = 1, entity: dict[str, Any] | None = None) -> dict[str, Any]:
    """The entity, and the instance in the walk's state `index` (0 up, 1 update_failed, 2 up again)."""
    kube.add(custom_path("serviceentities", NS, "database"), {"spec": entity or ENTITY_SPEC})
    status = walked()[index]
    return kube.add(SI, {"spec": {"entity": "database", "attributes": dict(status.client_attributes or CLIENT)},
                         "status": status.model_dump(by_alias=True, mode="json", exclude_none=True)})


def call(kube: FakeApi, body: Any = None) -> ConsoleCall:
    return ConsoleCall(kube=kube, stead=None, user="alice", params={"namespace": NS, "name": "db-1"},  # type: ignore[arg-type]
                       body=body)


def test_the_page_is_read_as_the_user_with_the_builtin_lifecycle_when_its_cluster_copy_is_unreadable(
        kube: FakeApi) -> None:
    seeded(kube)
    kube.fail_with(ApiError(403, "forbidden"), "GET", "/clusterlifecycles/simple")
    page = asyncio.run(lifecycle.page(call(kube)))
    assert page["state"] == "update_failed" and [n["name"] for n in page["diagram"]["nodes"] if n["lit"]] == [
        "update_failed"]
    assert [a["test"] for a in page["actions"]] == ["action-set-state-rollback", "action-delete"]


def test_a_lifecycle_the_user_may_not_read_is_no_diagram_and_no_action(kube: FakeApi) -> None:
    seeded(kube, entity={**ENTITY_SPEC, "lifecycle": {"name": "mine"}})
    kube.fail_with(ApiError(403, "forbidden"), "GET", "/lifecycles/mine")
    page = asyncio.run(lifecycle.page(call(kube)))
    assert page["diagram"] is None and not page["actions"] and "lifecycle mine" in page["lifecycle_problem"]
    with pytest.raises(ConsoleError) as refused:
        asyncio.run(lifecycle.set_state(call(kube, {"target": "rollback", "currentVersion": 8})))
    assert refused.value.status == 409 and kube.count("PATCH") == 0


def test_a_state_request_is_patched_into_the_spec_as_the_cli_does(kube: FakeApi) -> None:
    seeded(kube)
    page = asyncio.run(lifecycle.set_state(call(kube, {"target": "rollback", "currentVersion": 8})))
    assert kube.count("PATCH", SI) == 1
    assert kube.objects[SI]["spec"]["stateRequest"] == {"target": "rollback", "currentVersion": 8}
    assert page["busy"] == 'the state request "rollback" has not been taken in yet' and not page["actions"]


def test_an_action_not_allowed_now_or_at_a_stale_version_is_refused_before_any_write(kube: FakeApi) -> None:
    seeded(kube, index=0)  # up, version 4
    for body, status, words in (({"target": "rollback", "currentVersion": 4}, 409, "allowed now: update, delete"),
                                ({"target": "rollback", "currentVersion": 3}, 409, "(3) doesn't match"),
                                ({"target": "rollback"}, 422, "currentVersion"),
                                ([], 422, "body")):
        with pytest.raises(ConsoleError) as refused:
            asyncio.run(lifecycle.set_state(call(kube, body)))
        assert refused.value.status == status and words in refused.value.message
    assert kube.count("PATCH") == 0 and kube.count("DELETE") == 0


def test_an_update_patches_the_typed_attributes_with_the_version_seen(kube: FakeApi) -> None:
    seeded(kube, index=0)
    asyncio.run(lifecycle.update(call(kube, {"attributes": {"port": "6000"}, "currentVersion": 4})))
    spec = kube.objects[SI]["spec"]
    assert spec["attributes"] == {**CLIENT, "port": 6000} and spec["currentVersion"] == 4
    with pytest.raises(ConsoleError) as refused:  # update_failed has no on_update transfer
        kube.objects[SI]["status"] = walked()[1].model_dump(by_alias=True, mode="json", exclude_none=True)
        kube.objects[SI]["spec"]["attributes"] = dict(walked()[1].client_attributes or {})
        asyncio.run(lifecycle.update(call(kube, {"attributes": {"port": "7000"}, "currentVersion": 8})))
    assert refused.value.status == 409 and kube.count("PATCH") == 1


def test_a_delete_names_the_instance_by_uid(kube: FakeApi) -> None:
    obj = seeded(kube)
    asyncio.run(lifecycle.delete(call(kube, {"currentVersion": 8})))
    assert kube.received[-1].method == "DELETE" and kube.received[-1].body["preconditions"] == {
        "uid": obj["metadata"]["uid"]}
    assert SI not in kube.objects
