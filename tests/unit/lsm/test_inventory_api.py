"""The service inventory HTTP API (`operators.lsm.api`) on the configuration API's routing, over the shared fake
API server: routes, id forms, current_version, the engine's refusals before any write, the webhook's passed on,
and authorization per verb."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest

from operators.config.api import ConfigApi
from operators.config.repository import ConfigRepository
from operators.lsm.api import InventoryApi
from operators.runtime.kube.client import ApiError, custom_path
from operators.runtime.serving.http import Request
from tests.unit.fakeapi import FakeApi, FakeAuth
from tests.unit.lsm.kindsupport import INSTANCES, NS, greeter_entity, instance_spec

INV = "/lsm/v1/service_inventory/greeter"
UP: dict[str, Any] = {
    "state": "up", "version": 4, "identity": "db-1",
    "activeAttributes": {"name": "db-1", "who": "one", "region": "eu"},
    "clientAttributes": {"name": "db-1", "who": "one", "region": "eu"},
    "log": [{"from": "update_inprogress", "to": "up", "trigger": "resource_based", "version": 4,
             "time": "2025-01-01T00:05:00Z"}],
}


class Client:
    def __init__(self, kube: FakeApi) -> None:
        self.kube = kube
        self.auth = FakeAuth()
        repository = cast(ConfigRepository, None)  # the inventory's routes never touch the configuration store
        self.api = ConfigApi(repository, self.auth, NS, [InventoryApi(kube, self.auth, NS)])

    def call(self, method: str, path: str, body: Any = None, query: str = "", token: str = "good",
             raw: bool = False) -> tuple[int, Any]:
        """The status and the body; an answer's `data` unwrapped from Inmanta's envelope unless `raw`."""
        headers = {"authorization": f"Bearer {token}"}
        data = b"" if body is None else json.dumps(body).encode()
        response = asyncio.run(self.api(Request(method, path, query, headers, data)))
        answer = json.loads(response.body) if response.body else None
        if not raw and response.status < 400 and isinstance(answer, dict) and set(answer) == {"data"}:
            answer = answer["data"]
        return response.status, answer


@pytest.fixture
def client(kube: FakeApi) -> Client:
    kube.add(custom_path("serviceentities", NS, "greeter"), {"spec": greeter_entity(realized=False)})
    kube.add(custom_path("serviceentities", NS, "other"), {"spec": greeter_entity(realized=False)})
    return Client(kube)


def instance(kube: FakeApi, name: str = "db-1", status: dict[str, Any] | None = None, entity: str = "greeter",
             **attributes: Any) -> dict[str, Any]:
    return kube.add(f"{INSTANCES}/{name}", {
        "apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
        "metadata": {"name": name, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": instance_spec(name, entity, **attributes), "status": dict(UP if status is None else status)})


def stored(kube: FakeApi, name: str = "db-1") -> dict[str, Any]:
    return kube.objects[f"{INSTANCES}/{name}"]


# --- create and read ---------------------------------------------------------------------------------------


def test_a_creation_writes_a_service_instance_named_after_its_identity(client: Client) -> None:
    status, body = client.call("POST", INV, {"attributes": {"name": "db-1", "who": "one", "region": "eu"}})
    assert status == 201
    assert stored(client.kube)["spec"] == {"entity": "greeter", "attributes": {"name": "db-1", "who": "one",
                                                                              "region": "eu"}}
    assert body["name"] == "db-1" and body["service_entity"] == "greeter" and body["id"]
    assert set(body) >= {"id", "service_entity", "version", "config", "state", "candidate_attributes",
                         "active_attributes", "rollback_attributes", "created_at", "last_updated", "deleted",
                         "service_identity_attribute_value"}
    status, body = client.call("POST", INV, {"attributes": {"name": "Db 2", "who": "x", "region": "eu"},
                                             "service_instance_id": "7d1f4cb0-1f1e-4b7e-9a57-0d3c2c1d2e3f"})
    assert status == 201 and body["name"] == "7d1f4cb0-1f1e-4b7e-9a57-0d3c2c1d2e3f"


def test_a_creation_is_answered_as_the_creation_transfer_makes_it_version_1_in_the_initial_state(
        client: Client) -> None:
    """Inmanta answers a creation with version 1; the operator has not taken it in yet, so the view says
    what the creation transfer makes of it, and reads and current_version agree until the operator writes."""
    attributes = {"name": "db-1", "who": "one", "region": "eu"}
    status, body = client.call("POST", INV, {"attributes": attributes})
    assert status == 201
    assert (body["version"], body["state"], body["model_state"]) == (1, "start", "candidate")
    assert body["candidate_attributes"] == attributes and body["active_attributes"] is None
    status, body = client.call("GET", f"{INV}/db-1", query="current_version=1")
    assert status == 200 and (body["version"], body["state"]) == (1, "start")
    [listed] = client.call("GET", INV)[1]["data"]
    assert (listed["version"], listed["state"]) == (1, "start")
    assert client.call("GET", f"{INV}/db-1", query="current_version=2")[0] == 409
    stored(client.kube)["status"] = dict(UP)  # the operator took it in: its status is what is shown
    assert client.call("GET", f"{INV}/db-1")[1]["version"] == UP["version"]


def test_a_creation_the_engine_refuses_is_answered_and_nothing_is_written(client: Client) -> None:
    status, body = client.call("POST", INV, {"attributes": {"name": "db-1", "who": "one", "region": "eu",
                                                            "address": "x"}})
    assert status == 422 and body["error"] == "ReadOnlyAttribute"
    assert "spec.attributes.address: read-only (modifier r)" in body["message"]
    instance(client.kube, "db-0", {**UP, "identity": "db-0"})
    status, body = client.call("POST", INV, {"name": "db-9", "attributes": {"name": "db-0", "who": "a",
                                                                            "region": "eu"}})
    assert status == 409 and "name=db-0 is already used by service instance db-0" in body["message"]
    assert client.kube.names(INSTANCES) == ["db-0"]


def test_an_unknown_entity_is_404_naming_the_entities_there(client: Client) -> None:
    status, body = client.call("POST", "/lsm/v1/service_inventory/nope", {"attributes": {}})
    assert status == 404 and body["notFound"] == "service_entity"
    assert body["message"] == ('service entity "nope" not found in namespace "ns" (service entities here: greeter, '
                               "other)")
    assert client.call("GET", "/lsm/v1/service_inventory/nope")[0] == 404


def test_an_instance_is_found_by_uid_name_or_identity(client: Client) -> None:
    uid = instance(client.kube)["metadata"]["uid"]
    for ident in (uid, "db-1", "name=db-1"):
        status, body = client.call("GET", f"{INV}/{ident}")
        assert status == 200, body
        assert body["id"] == uid and body["state"] == "up" and body["version"] == 4
        assert body["active_attributes"] == UP["activeAttributes"] and body["last_updated"] == "2025-01-01T00:05:00Z"
        assert body["service_identity_attribute_value"] == "db-1" and body["deleted"] is False
    status, body = client.call("GET", f"{INV}/db-7")
    assert status == 404 and body["notFound"] == "service_instance" and "'db-7'" in body["message"]
    status, body = client.call("GET", f"{INV}/who=one")
    assert status == 404 and "'who' is not the service identity" in body["message"]


def test_an_instance_of_another_entity_is_not_found_under_this_one(client: Client) -> None:
    instance(client.kube, "db-1", entity="other")
    status, body = client.call("GET", f"{INV}/db-1")
    assert status == 404 and 'an instance of service entity "other", not of "greeter"' in body["message"]


def test_a_list_holds_the_entitys_instances_only(client: Client) -> None:
    instance(client.kube, "db-1")
    instance(client.kube, "db-2", entity="other")
    status, body = client.call("GET", INV)
    assert status == 200 and [i["name"] for i in body["data"]] == ["db-1"]
    assert body["metadata"] == {"total": 1, "before": 0, "after": 0, "page_size": 1000}
    assert body["links"] == {"self": INV}


def test_every_answer_but_an_error_is_in_inmantas_data_envelope(client: Client) -> None:
    instance(client.kube, "db-1")
    status, body = client.call("GET", f"{INV}/db-1", raw=True)
    assert status == 200 and set(body) == {"data"} and body["data"]["name"] == "db-1"
    status, body = client.call("GET", f"{INV}/nope", raw=True)
    assert status == 404 and "data" not in body and body["message"]


def test_a_list_pages_forward_and_back_by_cursor_with_inmantas_links_and_metadata(client: Client) -> None:
    for i in range(7):
        created = instance(client.kube, f"db-{i}")
        created["metadata"]["creationTimestamp"] = f"2025-01-0{i + 1}T00:00:00Z"
    status, first = client.call("GET", INV, query="limit=3")
    assert status == 200 and [r["name"] for r in first["data"]] == ["db-6", "db-5", "db-4"]  # newest first
    assert first["metadata"] == {"total": 7, "before": 0, "after": 4, "page_size": 3} and "prev" not in first["links"]
    path, _, query = first["links"]["next"].partition("?")
    assert path == INV
    newest = instance(client.kube, "db-9")  # created between two pages: on no later page; nothing repeats
    newest["metadata"]["creationTimestamp"] = "2025-02-01T00:00:00Z"
    status, second = client.call("GET", INV, query=query)
    assert [r["name"] for r in second["data"]] == ["db-3", "db-2", "db-1"]
    assert second["metadata"] == {"total": 8, "before": 4, "after": 1, "page_size": 3}
    third = client.call("GET", INV, query=second["links"]["next"].partition("?")[2])[1]
    assert [r["name"] for r in third["data"]] == ["db-0"] and "next" not in third["links"]
    back = client.call("GET", INV, query=third["links"]["prev"].partition("?")[2])[1]
    assert [r["name"] for r in back["data"]] == ["db-3", "db-2", "db-1"]
    by_name = client.call("GET", INV, query="sort=name.asc&limit=2")[1]
    assert [r["name"] for r in by_name["data"]] == ["db-0", "db-1"]
    assert "sort=name.asc" in by_name["links"]["next"] and "limit=2" in by_name["links"]["next"]


def test_a_list_filters_by_state_identity_sets_and_deletion(client: Client) -> None:
    instance(client.kube, "db-1")
    instance(client.kube, "db-2", status={**UP, "state": "creating", "identity": "db-2", "activeAttributes": None})
    instance(client.kube, "db-3", status={**UP, "identity": "db-3", "deleted": True})

    def names(query: str) -> list[str]:
        status, body = client.call("GET", INV, query=query)
        assert status == 200, body
        return sorted(r["name"] for r in body["data"])

    assert names("") == ["db-1", "db-2"]  # being deleted: left out, as Inmanta does
    assert names("include_deleted=true") == ["db-1", "db-2", "db-3"]
    assert names("filter.deleted=true") == ["db-3"]
    assert names("filter.state=creating") == ["db-2"]
    assert names("filter.state=creating&filter.state=up") == ["db-1", "db-2"]
    assert names("filter.name=db-2") == ["db-2"]  # the entity's identity attribute, by its own name
    assert names("filter.id_or_service_identity=b-1") == ["db-1"]
    assert names("filter.attribute_set_empty=active_attributes") == ["db-2"]
    assert names("filter.attribute_set_not_empty=active_attributes") == ["db-1"]
    uid = client.call("GET", f"{INV}/db-1")[1]["id"]
    assert names(f"filter.id={uid}") == ["db-1"]


@pytest.mark.parametrize(("query", "names"), [
    ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"), ("sort=color.asc", "sort"),
    ("sort=created_at", "sort"), ("filter.colour=red", "filter.colour"), ("filter.deleted=maybe", "filter.deleted"),
    ("filter.attribute_set_empty=secrets", "filter.attribute_set_empty"), ("start_after=garbage", "start_after"),
    ("start_after=" + "A" * 3000, "start_after"), ("limit=1&limit=2", "limit"),
])
def test_a_list_query_it_cannot_understand_is_400_naming_the_parameter(client: Client, query: str, names: str
                                                                      ) -> None:
    status, body = client.call("GET", INV, query=query)
    assert status == 400 and f"query parameter {names}" in body["message"], body


def test_a_stale_current_version_on_a_read_is_409_with_inmantas_message(client: Client) -> None:
    instance(client.kube)
    assert client.call("GET", f"{INV}/db-1", query="current_version=4")[0] == 200
    status, body = client.call("GET", f"{INV}/db-1", query="current_version=3")
    assert status == 409 and body["error"] == "StaleVersion"
    assert body["message"] == ("The given current version (3) doesn't match the actual current version (4) of "
                               "service instance db-1")
    assert client.call("GET", f"{INV}/db-1", query="current_version=x")[0] == 400


# --- update, set-state, delete ------------------------------------------------------------------------------


def test_an_update_patches_the_attributes_and_current_version(client: Client) -> None:
    instance(client.kube)
    status, body = client.call("PATCH", f"{INV}/name=db-1", {"current_version": 4, "attributes": {"who": "two"}})
    assert status == 200, body
    spec = stored(client.kube)["spec"]
    assert spec["attributes"] == {"name": "db-1", "who": "two", "region": "eu"} and spec["currentVersion"] == 4
    assert body["attributes"]["who"] == "two"


def test_a_stale_update_is_409_and_writes_nothing(client: Client) -> None:
    instance(client.kube)
    before = client.kube.count("PATCH")
    status, body = client.call("PATCH", f"{INV}/db-1", {"current_version": 3, "attributes": {"who": "two"}})
    assert status == 409 and body["error"] == "StaleVersion" and "(3)" in body["message"]
    status, body = client.call("PATCH", f"{INV}/db-1", {"attributes": {"who": "two"}}, query="current_version=2")
    assert status == 409 and "(2)" in body["message"]
    assert client.kube.count("PATCH") == before and stored(client.kube)["spec"]["attributes"]["who"] == "one"
    status, body = client.call("PATCH", f"{INV}/db-1", {"attributes": {"who": "two"}})
    assert status == 400 and body["message"].startswith("current_version: required")


def test_updates_the_lifecycle_or_the_entity_refuse_are_answered_before_writing(client: Client) -> None:
    instance(client.kube)
    status, body = client.call("PATCH", f"{INV}/db-1", {"current_version": 4, "attributes": {"region": "us"}})
    assert status == 422 and body["message"] == ("spec.attributes.region: set at creation only (modifier rw); rw+ "
                                                 "attributes may change")
    instance(client.kube, "db-2", {**UP, "state": "creating", "identity": "db-2"})
    status, body = client.call("PATCH", f"{INV}/db-2", {"current_version": 4, "attributes": {"who": "two"}})
    assert status == 409 and body["error"] == "UpdateNotAllowed"
    assert body["message"].startswith('service instance db-2 in state "creating" cannot be updated')
    assert client.kube.count("PATCH") == 0


def test_a_refusal_of_the_webhook_and_a_concurrent_write_are_passed_on(client: Client) -> None:
    instance(client.kube)
    denied = 'admission webhook "serviceinstances.stead.dev" denied the request: spec.attributes.who: no'
    client.kube.fail_with(ApiError(422, denied), "PATCH")
    status, body = client.call("PATCH", f"{INV}/db-1", {"current_version": 4, "attributes": {"who": "two"}})
    assert status == 422 and denied in body["message"]
    client.kube.fail_with(ApiError(409, "the object has been modified"), "PATCH")
    status, body = client.call("PATCH", f"{INV}/db-1", {"current_version": 4, "attributes": {"who": "two"}})
    assert status == 409 and body["error"] == "Conflict" and "changed while updating it" in body["message"]


def test_a_state_request_is_written_to_the_spec_on_both_paths(client: Client) -> None:
    instance(client.kube, status={**UP, "state": "update_rejected"})
    status, body = client.call("POST", f"{INV}/db-1/state", {"current_version": 4, "target_state": "up",
                                                             "message": "keep it"})
    assert status == 200, body
    assert stored(client.kube)["spec"]["stateRequest"] == {"target": "up", "currentVersion": 4, "message": "keep it"}
    instance(client.kube, "db-2", {**UP, "state": "update_rejected", "identity": "db-2"})
    status, body = client.call("POST", "/lsm/v1/services/greeter/db-2/state",
                               {"current_version": 4, "target_state": "up"})
    assert status == 200 and stored(client.kube, "db-2")["spec"]["stateRequest"]["target"] == "up"


def test_a_state_request_the_lifecycle_refuses_is_409(client: Client) -> None:
    instance(client.kube)
    status, body = client.call("POST", f"{INV}/db-1/state", {"current_version": 4, "target_state": "rollback"})
    assert status == 409 and "rollback" in body["message"] and "stateRequest" not in stored(client.kube)["spec"]
    status, body = client.call("POST", f"{INV}/db-1/state", {"current_version": 1, "target_state": "up"})
    assert status == 409 and body["error"] == "StaleVersion"
    assert client.call("POST", f"{INV}/db-1/state", {"current_version": 4})[0] == 400


def test_a_delete_deletes_the_object_unless_the_state_refuses(client: Client) -> None:
    instance(client.kube, "db-2", {**UP, "state": "update_inprogress", "identity": "db-2"})
    status, body = client.call("DELETE", f"{INV}/db-2", query="current_version=4")
    assert status == 409 and 'in state "update_inprogress"' in body["message"]
    assert "db-2" in client.kube.names(INSTANCES)
    instance(client.kube)
    status, body = client.call("DELETE", f"{INV}/name=db-1", query="current_version=3")
    assert status == 409 and body["error"] == "StaleVersion"
    status, body = client.call("DELETE", f"{INV}/name=db-1", query="current_version=4")
    assert status == 200 and body["name"] == "db-1" and client.kube.names(INSTANCES) == ["db-2"]


# --- authentication and authorization -----------------------------------------------------------------------


def test_every_write_is_authorized_per_verb_on_serviceinstances(client: Client) -> None:
    instance(client.kube)
    assert client.call("GET", f"{INV}/db-1", token="reader")[0] == 200
    assert client.call("GET", INV, token="reader")[0] == 200
    for method, path, body in (("POST", INV, {"attributes": {"name": "db-5", "who": "a", "region": "eu"}}),
                               ("PATCH", f"{INV}/db-1", {"current_version": 4, "attributes": {"who": "b"}}),
                               ("POST", f"{INV}/db-1/state", {"current_version": 4, "target_state": "up"}),
                               ("DELETE", f"{INV}/db-1", None)):
        status, answer = client.call(method, path, body, token="reader")
        assert status == 403 and answer["message"].startswith('user "reader" may not '), (method, answer)
    verbs = {(a.verb, a.name) for a in client.auth.checked}
    assert {("get", "db-1"), ("list", ""), ("create", ""), ("update", "db-1"), ("delete", "db-1")} <= verbs
    assert {a.resource for a in client.auth.checked} == {"serviceinstances"}
    assert {a.namespace for a in client.auth.checked} == {NS}
    assert client.kube.names(INSTANCES) == ["db-1"] and client.kube.count("PATCH") == 0
    # an id that names nothing is not told apart from one the caller may not see
    client.auth.checked.clear()
    assert client.call("GET", f"{INV}/nothing", token="nobody")[0] == 401


def test_a_namespace_is_taken_from_the_query(client: Client) -> None:
    client.kube.add(custom_path("serviceentities", "team", "greeter"), {"spec": greeter_entity(realized=False)})
    status, _ = client.call("POST", INV, {"attributes": {"name": "t-1", "who": "a", "region": "eu"}},
                            query="namespace=team")
    assert status == 201 and "t-1" in client.kube.names(custom_path("serviceinstances", "team"))
    assert client.call("GET", INV, query="namespace=Bad_NS")[0] == 400


def test_the_routes_are_listed_and_in_the_openapi_document(client: Client) -> None:
    status, body = client.call("GET", "/api/v1")
    assert status == 200
    listed = {(r["method"], r["path"]) for r in body["routes"]}
    assert ("PATCH", f"{INV.removesuffix('greeter')}{{entity}}/{{id}}") in listed
    status, document = client.call("GET", "/api/v1/config/openapi.json")
    paths = document["paths"]
    assert {"/lsm/v1/service_inventory/{entity}", "/lsm/v1/service_inventory/{entity}/{id}",
            "/lsm/v1/service_inventory/{entity}/{id}/state", "/lsm/v1/services/{entity}/{id}/state"} <= set(paths)
    assert set(paths["/lsm/v1/service_inventory/{entity}/{id}"]) >= {"get", "patch", "delete"}
    assert "ServiceInstance" in document["components"]["schemas"]
    assert client.call("PUT", f"{INV}/db-1", {})[0] == 405


def test_writes_impersonate_the_caller_and_reads_are_the_operators(client: Client) -> None:
    """Issue 25, finding 12: the API server's admission and audit must see the caller, not the operator."""
    instance(client.kube)
    first = len(client.kube.received)
    assert client.call("POST", INV, {"attributes": {"name": "db-2", "who": "two", "region": "eu"}})[0] == 201
    assert client.call("PATCH", f"{INV}/db-1", {"current_version": 4, "attributes": {"who": "x"}})[0] == 200
    assert client.call("DELETE", f"{INV}/db-1")[0] == 200
    sent = list(zip(client.kube.received, client.kube.headers, strict=True))[first:]
    assert [r.method for r, _ in sent if r.method != "GET"] == ["POST", "PATCH", "DELETE"]
    assert all(headers == (("Impersonate-User", "good"),) for r, headers in sent if r.method != "GET"), sent
    assert all(headers == () for r, headers in sent if r.method == "GET")
