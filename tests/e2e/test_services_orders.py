"""Service orders end to end (issue 31, item 3): a ServiceOrder applied with kubectl runs its items in dependency
order on the real API server, webhook and operator; an order sent to `/lsm/v2/order` whose first item fails
stops its dependent, not the independent item, and ends partial. (The test's name puts its namespace among
those the session's operator trusts to run the Blueprint's scripts on its host, `t-test-app*`.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from operators.cluster import Binaries, ClusterInfo
from tests.e2e.conftest import Kubectl, OperatorProcess, api_call
from tests.e2e.tenant_accounts import tenant_kubectl
from tests.e2e.test_apps import apply, get
from tests.e2e.test_config_api import client_certificate
from tests.e2e.test_services import API, catalog, entity, instance, status_of
from tests.polling import wait_until


def service_order(name: str, namespace: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceOrder", "metadata": {"name": name, "namespace": namespace},
            "spec": {"items": list(items)}}


def ended(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    def result() -> dict[str, Any] | None:
        status: dict[str, Any] = get(kubectl, "serviceorder", name, namespace).get("status") or {}
        return status if status.get("result") not in (None, "in_progress") else None

    found: dict[str, Any] = wait_until(result, 60, f"order {name} ended", interval=0.2)
    return found


def test_app_service_orders_run_in_dependency_order_and_a_failure_stops_its_dependents_only(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """Two orders at once in one namespace (they share the catalog and the wait): `launch`, applied with kubectl
    (create a, create b depending on a, update c, of an entity with no App to run, so that the order's own
    sequencing is what is timed), completes; `mixed`, sent to the API, whose first item fails validation (the
    Blueprint's rule), skips its dependent but not the independent item (its App runs), and ends partial."""
    admin = client_certificate(operator.cluster, tmp_path, "orders-admin", ("system:masters",))
    catalog(kubectl, namespace)
    plain = entity("plain", namespace)  # no realization: its instances are up at once (no App to run)
    del plain["spec"]["realization"]
    apply(kubectl, plain)
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "40s", "serviceentity/plain")
    apply(kubectl, instance("c", namespace, "plain", who="one"))
    cycle = service_order("loop", namespace, {"id": "x", "action": "delete", "instance": "c", "dependencies": ["y"]},
                          {"id": "y", "action": "delete", "instance": "c", "dependencies": ["x"]})
    refused = apply(kubectl, cycle, check=False)
    assert refused.returncode != 0 and "a dependency cycle: x -> y -> x" in refused.stderr, refused.stderr
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "60s", "si/c")

    apply(kubectl, service_order(
        "launch", namespace,
        {"id": "a", "action": "create", "instance": "a", "entity": "plain",
         "attributes": {"name": "a", "who": "alpha", "region": "eu"}},
        {"id": "b", "action": "create", "instance": "b", "entity": "plain",
         "attributes": {"name": "b", "who": "beta", "region": "eu"}, "dependencies": ["a"]},
        {"id": "c", "action": "update", "instance": "c", "attributes": {"who": "two"}}))
    body = {"name": "mixed", "service_order_items": [
        {"instance_id": "bad", "action": "create", "service_entity": "greeter",
         "attributes": {"name": "bad", "who": "Bad1", "region": "eu"}},  # the Blueprint's rule: [a-z]+
        {"instance_id": "after", "action": "create", "service_entity": "greeter",
         "attributes": {"name": "after", "who": "x", "region": "eu"}, "dependencies": ["bad"]},
        {"instance_id": "solo", "action": "create", "service_entity": "greeter",
         "attributes": {"name": "solo", "who": "y", "region": "eu"}}]}
    code, created = api_call(operator, admin, namespace, "POST", "/lsm/v2/order", body)
    assert code == 201, created

    status = ended(kubectl, namespace, "launch")
    assert status["result"] == "completed", status
    assert status["phase"] == "Provisioned" and status["completedCount"] == 3
    assert {s["id"]: s["state"] for s in status["items"]} == {"a": "completed", "b": "completed", "c": "completed"}
    assert status_of(kubectl, namespace, "c")["activeAttributes"]["who"] == "two"
    # b started only once a had completed: a was up before b was created
    a_up = next(e["time"] for e in status_of(kubectl, namespace, "a")["log"] if e["to"] == "up")
    b_created = get(kubectl, "si", "b", namespace)["metadata"]["creationTimestamp"]
    assert a_up <= b_created
    edited = kubectl("patch", "serviceorder", "launch", "-n", namespace, "--type", "merge", "-p",
                     json.dumps({"spec": {"description": "again"}}), check=False)
    assert edited.returncode != 0 and "an order cannot change once accepted" in edited.stderr

    status = ended(kubectl, namespace, "mixed")
    assert status["result"] == "partial" and status["phase"] == "Partial", status
    items = {s["id"]: s for s in status["items"]}
    assert (items["bad"]["state"], items["bad"]["failureType"]) == ("failed", "Rejected")
    assert (items["after"]["state"], items["after"]["failureType"]) == ("skipped", "DependencyFailed")
    assert items["solo"]["state"] == "completed"
    assert "after" not in kubectl("get", "si", "-n", namespace, "-o", "name").stdout
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "OrderPartial"
    code, shown = api_call(operator, admin, namespace, "GET", "/lsm/v2/order/mixed")
    assert code == 200 and shown["data"]["status"]["state"] == "partial"
    assert shown["data"]["service_order_items"][1]["status"]["failure_type"] == "DependencyFailed"


def test_service_order_is_refused_unless_its_author_may_do_what_its_items_do(
        operator: OperatorProcess, kubectl: Kubectl, cluster: ClusterInfo, binaries: Binaries, namespace: str,
        tmp_path: Path) -> None:
    """The operator carries an order out with its own rights, so the API server (the policy
    stead-service-order-rights) refuses a kubectl-created order whose author may create ServiceOrders but not
    what an item does to ServiceInstances, naming the verb and the item; granted that verb, the same order
    is accepted."""
    author = tenant_kubectl(kubectl, cluster, binaries, namespace, tmp_path, account="orderer",
                            stead_verbs=("create",), stead_resources=("serviceorders",))
    order = json.dumps(service_order("sneak", namespace, {"id": "new-one", "action": "create", "instance": "x",
                                                           "entity": "plain", "attributes": {"name": "x"}}))
    refused = author("create", "-f", "-", input=order, check=False)
    assert refused.returncode != 0, refused.stdout
    assert "may not create serviceinstances.stead.dev" in refused.stderr, refused.stderr
    assert 'item(s) new-one (instance x) need the verb "create" on resource "serviceinstances"' in refused.stderr
    kubectl("create", "role", "instances-create", "-n", namespace, "--verb=create",
            "--resource=serviceinstances.stead.dev")
    kubectl("create", "rolebinding", "instances-create", "-n", namespace, "--role=instances-create",
            f"--serviceaccount={namespace}:orderer")
    # RBAC's cache takes the binding in shortly after it is written
    wait_until(lambda: author("create", "-f", "-", input=order, check=False).returncode == 0, 10,
               "the order accepted once its author may create instances", interval=0.2)
