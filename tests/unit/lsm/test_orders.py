"""Service orders (`operators.lsm.orders`, `operators.lsm.ordering`, the `/lsm/v2/order` routes): the checks that
refuse an order at apply time naming its items, dependency order and the propagation of a failure to dependents
only, an item's outcome read off its instance, the step's writes over the fake API server, and the API route."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from operators.lsm.kinds import SERVICE_ORDER_KIND
from operators.lsm.models import OrderItem, OrderItemStatus, ServiceOrderSpec
from operators.lsm.ordering import ORDER_ANNOTATION
from operators.lsm.orders import advance_order, item_outcome, order_problems, order_result
from operators.runtime.core import pipeline as engine
from operators.runtime.core.pipeline import Observed
from operators.runtime.kube.client import ApiError, custom_path
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import INSTANCES, NS, make_world
from tests.unit.lsm.test_inventory_api import Client

NOW = "2025-01-01T00:00:00Z"


def order(*items: dict[str, Any]) -> ServiceOrderSpec:
    return ServiceOrderSpec.model_validate({"items": list(items)})


def create(id_: str, *deps: str) -> dict[str, Any]:
    return {"id": id_, "action": "create", "instance": id_, "entity": "greeter",
            "attributes": {"name": id_, "who": "x"}, "dependencies": list(deps)}


def states(spec: ServiceOrderSpec, **given: str) -> dict[str, OrderItemStatus]:
    return {i: OrderItemStatus(id=i, state=s, failure_type="Rejected" if s == "failed" else None)  # type: ignore[arg-type]
            for i, s in given.items()}


# --- checks -------------------------------------------------------------------------------------------------


def test_an_unknown_dependency_a_self_dependency_and_wrong_fields_are_named() -> None:
    spec = order(create("a", "ghost"), {"id": "b", "action": "update", "instance": "b", "dependencies": ["b"]},
                 {"id": "c", "action": "delete", "instance": "c", "attributes": {"x": 1}},
                 {"id": "d", "action": "create", "instance": "d"})
    problems = order_problems(spec)
    assert "spec.items[0] (a).dependencies: item 'a' depends on 'ghost', which is no item of this order " \
           "(items: a, b, c, d)" in problems
    assert "spec.items[1] (b).dependencies: item 'b' depends on itself" in problems
    assert "spec.items[1] (b).attributes: required with action update (the attributes to change)" in problems
    assert "spec.items[2] (c).attributes: not with action delete" in problems
    assert "spec.items[3] (d).entity: required with action create" in problems


def test_a_cycle_is_refused_naming_its_items() -> None:
    problems = order_problems(order(create("a", "c"), create("b", "a"), create("c", "b"), create("d")))
    assert problems == ["spec.items: a dependency cycle: a -> c -> b -> a (no item of it could ever start)"]


def test_two_unordered_items_on_one_instance_are_refused_but_ordered_ones_pass() -> None:
    upd = {"id": "u", "action": "update", "instance": "a", "attributes": {"who": "y"}}
    assert order_problems(order(create("a"), upd)) == [
        "spec.items: items 'a' and 'u' both change instance 'a' and neither depends on the other (their order "
        "would be a race)"]
    assert order_problems(order(create("a"), {**upd, "dependencies": ["a"]})) == []


def test_the_webhook_runs_the_checks_and_the_spec_is_immutable_in_the_crd() -> None:
    assert SERVICE_ORDER_KIND.problems is not None
    assert SERVICE_ORDER_KIND.problems({"items": [create("a", "a")]}) == [
        "spec.items[0] (a).dependencies: item 'a' depends on itself"]
    from operators.runtime.kube.crds import crd_for

    schema = crd_for(SERVICE_ORDER_KIND)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"


# --- progress -----------------------------------------------------------------------------------------------


def test_items_start_in_dependency_order() -> None:
    spec = order(create("a"), create("b", "a"), create("c"), create("d", "b", "c"))
    step = advance_order(spec, {}, NOW)
    assert [i.id for i in step.start] == ["a", "c"] and step.result == "in_progress"
    step = advance_order(spec, states(spec, a="completed", c="in_progress"), NOW)
    assert [i.id for i in step.start] == ["b"]
    step = advance_order(spec, states(spec, a="completed", b="completed", c="completed"), NOW)
    assert [i.id for i in step.start] == ["d"]


def test_a_failure_skips_its_dependents_transitively_not_the_others() -> None:
    spec = order(create("a"), create("b", "a"), create("c", "b"), create("d"))
    step = advance_order(spec, states(spec, a="failed"), NOW)
    by_id = {s.id: s for s in step.items}
    assert [i.id for i in step.start] == ["d"]
    assert (by_id["b"].state, by_id["b"].failure_type) == ("skipped", "DependencyFailed")
    assert by_id["b"].message == "not applied: its dependency 'a' failed (Rejected)"
    assert by_id["c"].message == "not applied: its dependency 'b' was skipped"
    assert by_id["d"].state == "waiting"


def test_the_result_is_completed_failed_or_partial_once_every_item_ended() -> None:
    def result(*given: str) -> str:
        return order_result([OrderItemStatus(id=str(i), state=s) for i, s in enumerate(given)])  # type: ignore[arg-type]

    assert result("completed", "in_progress") == "in_progress"
    assert result("completed", "completed") == "completed"
    assert result("failed", "skipped") == "failed"
    assert result("completed", "failed", "skipped") == "partial"


def _instance(generation: int, ready: str, stalled: str, observed: int, phase: str = "Provisioned"
              ) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": {"phase": phase, "state": "up", "conditions": [
        {"type": "Ready", "status": ready, "reason": "R", "message": "m", "observedGeneration": observed},
        {"type": "Stalled", "status": stalled, "reason": "ValidationFailed", "message": "who: bad",
         "observedGeneration": observed}]}}


def test_an_item_is_judged_at_the_generation_it_wrote_and_a_delete_when_the_object_goes() -> None:
    update = OrderItem(id="u", action="update", instance="c", attributes={"who": "y"})
    written = OrderItemStatus(id="u", state="in_progress", generation=3)
    assert item_outcome(update, written, _instance(3, "True", "False", 2), NOW) is None  # Ready of before
    done = item_outcome(update, written, _instance(3, "True", "False", 3), NOW)
    assert done is not None and done.state == "completed"
    failed = item_outcome(update, written, _instance(3, "False", "True", 3, phase="Rejected"), NOW)
    assert failed is not None and (failed.state, failed.failure_type) == ("failed", "Rejected")
    assert failed.message == "ValidationFailed: who: bad"
    gone = item_outcome(update, written, None, NOW)
    assert gone is not None and gone.failure_type == "Gone"
    delete = OrderItem(id="d", action="delete", instance="c")
    assert item_outcome(delete, written, _instance(3, "True", "False", 3), NOW) is None
    deleted = item_outcome(delete, written, None, NOW)
    assert deleted is not None and deleted.state == "completed"


# --- the step over the fake API server ----------------------------------------------------------------------


def _observed(spec: ServiceOrderSpec, status: dict[str, Any] | None = None) -> Observed:
    return Observed(kind="ServiceOrder", namespace=NS, name="o", uid="u-o", generation=1, labels={},
                    spec=spec.model_dump(by_alias=True, mode="json", exclude_none=True), status=dict(status or {}))


def _reconcile(world: Any, obj: Observed) -> tuple[Observed, engine.Outcome]:
    outcome = asyncio.run(engine.run(SERVICE_ORDER_KIND.pipeline, obj, "Init", services=world))
    status = engine.compose_status(obj, outcome, NOW)
    return Observed(**{**obj.__dict__, "status": status}), outcome


def _settle(kube: FakeApi, name: str, stalled: bool = False) -> None:
    obj = kube.objects[f"{INSTANCES}/{name}"]
    generation = obj["metadata"]["generation"]
    obj["status"] = {"phase": "Rejected" if stalled else "Provisioned", "state": "rejected" if stalled else "up",
                     "version": 4, "conditions": [
                         {"type": "Ready", "status": "False" if stalled else "True", "reason": "R", "message": "",
                          "observedGeneration": generation},
                         {"type": "Stalled", "status": "True" if stalled else "False", "reason": "ValidationFailed",
                          "message": "who: bad", "observedGeneration": generation}]}


def test_the_step_writes_items_in_order_and_ends_partial_when_one_fails(tmp_path: Path, kube: FakeApi) -> None:
    world = make_world(tmp_path, kube)
    kube.add(f"{INSTANCES}/c", {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
                                "spec": {"entity": "greeter", "attributes": {"name": "c", "who": "x"}},
                                "status": {"version": 4}})
    spec = order(create("a"), create("b", "a"), {"id": "u", "action": "update", "instance": "c",
                                                  "attributes": {"who": "y"}})
    obj, outcome = _reconcile(world, _observed(spec))
    assert outcome.error is not None and outcome.error.reason == "InProgress"
    assert sorted(kube.names(INSTANCES)) == ["a", "c"]  # b waits for a
    created = kube.objects[f"{INSTANCES}/a"]
    assert created["metadata"]["annotations"][ORDER_ANNOTATION] == "o/a"
    patched = kube.objects[f"{INSTANCES}/c"]["spec"]
    assert patched["attributes"] == {"name": "c", "who": "y"} and patched["currentVersion"] == 4
    assert [(s["id"], s["state"]) for s in obj.status["items"]] == [
        ("a", "in_progress"), ("b", "waiting"), ("u", "in_progress")]
    _settle(kube, "a", stalled=True)
    _settle(kube, "c")
    obj, outcome = _reconcile(world, obj)
    assert outcome.error is not None and outcome.error.reason == "OrderPartial" and obj.status["phase"] == "Partial"
    assert "b" not in kube.names(INSTANCES)
    assert obj.status["result"] == "partial" and obj.status["completedCount"] == 1
    items = {s["id"]: s for s in obj.status["items"]}
    assert (items["a"]["state"], items["a"]["failureType"]) == ("failed", "Rejected")
    assert (items["b"]["state"], items["b"]["failureType"]) == ("skipped", "DependencyFailed")
    assert items["u"]["state"] == "completed"
    assert ("o", "Warning", "Item", "item b: skipped: not applied: its dependency 'a' failed (Rejected)") \
        in world.events.events


def test_a_refused_write_fails_its_item_and_a_lost_status_write_adopts_its_own_create(
        tmp_path: Path, kube: FakeApi) -> None:
    world = make_world(tmp_path, kube)
    kube.add(f"{INSTANCES}/a", {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
                                "metadata": {"annotations": {ORDER_ANNOTATION: "o/a"}},
                                "spec": {"entity": "greeter", "attributes": {}}})
    kube.fail_with(ApiError(422, "spec.attributes.who: required"), "PATCH", "/c")
    kube.add(f"{INSTANCES}/c", {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
                                "spec": {"entity": "greeter", "attributes": {"name": "c"}}})
    spec = order(create("a"), {"id": "u", "action": "update", "instance": "c", "attributes": {"who": None}},
                 {"id": "x", "action": "delete", "instance": "x", "dependencies": ["u"]})
    obj, _ = _reconcile(world, _observed(spec))
    items = {s["id"]: s for s in obj.status["items"]}
    assert items["a"]["state"] == "in_progress"  # ours: not refused as taken
    assert (items["u"]["state"], items["u"]["failureType"]) == ("failed", "Refused")
    assert "spec.attributes.who: required" in items["u"]["message"]
    assert items["x"]["state"] == "skipped"


# --- the API ------------------------------------------------------------------------------------------------


@pytest.fixture
def api(kube: FakeApi) -> Client:
    return Client(kube)


ORDERS = custom_path("serviceorders", NS)


def test_the_api_creates_the_order_object_in_inmantas_shape_and_shows_its_state(api: Client) -> None:
    body = {"name": "o1", "description": "two", "service_order_items": [
        {"instance_id": "a", "action": "create", "service_entity": "greeter", "attributes": {"name": "a"}},
        {"instance_id": "b", "action": "create", "service_entity": "greeter", "attributes": {"name": "b"},
         "dependencies": ["a"]}]}
    status, created = api.call("POST", "/lsm/v2/order", body, query=f"namespace={NS}")
    assert status == 201, created
    assert created["status"]["state"] == "acknowledged"
    stored = api.kube.objects[f"{ORDERS}/o1"]
    assert stored["spec"]["items"][1] == {"id": "b", "action": "create", "instance": "b", "entity": "greeter",
                                          "attributes": {"name": "b"}, "dependencies": ["a"]}
    stored["status"] = {"result": "partial", "items": [
        {"id": "a", "state": "failed", "failureType": "Rejected", "message": "why"},
        {"id": "b", "state": "skipped", "failureType": "DependencyFailed", "message": "a failed"}]}
    status, shown = api.call("GET", "/lsm/v2/order/o1", query=f"namespace={NS}")
    assert status == 200 and shown["status"]["state"] == "partial"
    assert shown["service_order_items"][0]["status"] == {"state": "failed", "failure_type": "Rejected",
                                                         "reason": "why"}
    status, _ = api.call("GET", f"/lsm/v2/order/{stored['metadata']['uid']}", query=f"namespace={NS}")
    assert status == 200


def test_the_api_refuses_a_cycle_and_checks_the_callers_verbs_on_instances(api: Client) -> None:
    cyclic = {"service_order_items": [
        {"instance_id": "a", "action": "update", "edits": {"who": "y"}, "dependencies": ["b"]},
        {"instance_id": "b", "action": "update", "edits": {"who": "y"}, "dependencies": ["a"]}]}
    status, answer = api.call("POST", "/lsm/v2/order", cyclic, query=f"namespace={NS}")
    assert status == 422 and "a dependency cycle: a -> b -> a" in answer["message"]
    assert not api.kube.names(ORDERS)
    fine = {"service_order_items": [{"instance_id": "a", "action": "delete"}]}
    status, answer = api.call("POST", "/lsm/v2/order", fine, query=f"namespace={NS}", token="reader")
    assert status == 403 and not api.kube.names(ORDERS)
    api.auth.checked.clear()
    status, _ = api.call("POST", "/lsm/v2/order", fine, query=f"namespace={NS}")
    assert status == 201
    assert {(a.verb, a.resource) for a in api.auth.checked} == {("create", "serviceorders"),
                                                                 ("delete", "serviceinstances")}
    api.auth.checked.clear()  # an update needs patch, as the API server's policy asks of a kubectl-created order
    status, _ = api.call("POST", "/lsm/v2/order", {"name": "edit", "service_order_items": [
        {"instance_id": "a", "action": "update", "edits": {"who": "y"}}]}, query=f"namespace={NS}")
    assert status == 201
    assert ("patch", "serviceinstances") in {(a.verb, a.resource) for a in api.auth.checked}
