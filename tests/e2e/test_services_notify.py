"""Notifications end to end (docs/services.md#notifications): an entity's subscriptions receive its instances'
events as CloudEvents, from the session's real operator, at loopback receivers (tests/receiver.py) on
127.0.0.77, the address the session's operator allows (`--http-allow-networks`, tests/e2e/conftest.py).

Entities without a realization: their instances walk their lifecycle at once, no App, no script.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.test_apps import apply, get
from tests.e2e.test_services import condition, entity, in_state, instance, walk
from tests.receiver import receiving

HOST = "127.0.0.77"


def notified(name: str, namespace: str, subscriptions: list[dict[str, Any]]) -> dict[str, Any]:
    body = entity(name, namespace, notifications=subscriptions)
    del body["spec"]["realization"]
    return body


def deliveries(kubectl: Kubectl, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    status = get(kubectl, "serviceentity", name, namespace).get("status") or {}
    return {s["name"]: s for s in status.get("notifications") or []}


def test_a_receiver_gets_the_cloudevents_of_a_create_walk_filtered_by_type_and_a_refused_one_says_why(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str,
) -> None:
    with receiving(HOST) as receiver:
        url = receiver.url.replace("http://", "http://bot:s3cret@")
        refused = f"http://127.0.0.1:{operator.health_port}/metrics"  # the operator's own port
        apply(kubectl, notified("shop", namespace, [{"name": "states", "url": url, "types": ["state"]},
                                                    {"name": "own", "url": refused, "mode": "structured"}]))
        kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "serviceentity/shop")
        notifying = condition(get(kubectl, "serviceentity", "shop", namespace)["status"], "Notifying")
        assert notifying["status"] == "False" and notifying["reason"] == "EgressRefused", notifying
        assert notifying["message"].startswith("spec.notifications[1].url: refused to connect to 127.0.0.1: "
                                               "127.0.0.1 is a loopback address, which http tasks and notifications "
                                               "may not reach"), notifying
        apply(kubectl, instance("s-1", namespace, "shop", who="x"))
        states = [to for _, to, _ in walk(in_state(kubectl, namespace, "s-1", "up"))]
        wait_until(lambda: len(receiver.received) >= len(states), 20, "the state events", interval=0.1)
        assert [r.headers["ce-type"] for r in receiver.received] == ["dev.stead.service.state"] * len(states)
        assert [json.loads(r.body)["to"] for r in receiver.received] == states
        first = receiver.received[0]
        assert first.headers["ce-specversion"] == "1.0" and first.headers["ce-subject"] == "s-1"
        assert first.headers["ce-source"] == f"/namespaces/{namespace}/serviceentities/shop"
        assert first.headers["authorization"] == "Basic " + base64.b64encode(b"bot:s3cret").decode()
        shown = wait_until(lambda: (d := deliveries(kubectl, namespace, "shop")).get("states", {}).get("delivered")
                           == len(states) and d.get("own", {}).get("failures") and d, 20, "the counts in status")
        assert shown["states"]["url"] == receiver.url.replace("http://", "http://***@")
        assert "which http steps may not reach" in shown["own"]["lastError"], shown
        assert "s3cret" not in json.dumps(shown)


def test_a_500_then_ok_endpoint_gets_the_event_after_a_retry_and_a_hanging_one_holds_nothing(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str,
) -> None:
    with receiving(HOST, answers=["500"]) as flaky, receiving(HOST, then="hang") as stuck:
        apply(kubectl, notified("flaky", namespace, [{"name": "ops", "url": flaky.url, "types": ["failure", "state"],
                                                      "minLevel": "info"}]))
        apply(kubectl, notified("stuck", namespace, [{"name": "ops", "url": stuck.url}]))
        kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "serviceentity/flaky",
                "serviceentity/stuck")
        apply(kubectl, instance("h-1", namespace, "stuck", who="x"))
        wait_until(lambda: stuck.received, 20, "the hanging endpoint's first request", interval=0.1)
        # while h-1's events hang, another instance walks its lifecycle and its events are delivered
        apply(kubectl, instance("f-1", namespace, "flaky", who="x"))
        states = walk(in_state(kubectl, namespace, "f-1", "up"))
        shown = wait_until(lambda: deliveries(kubectl, namespace, "flaky").get("ops", {}).get("delivered")
                           == len(states) and deliveries(kubectl, namespace, "flaky")["ops"], 20, "the retried event")
        assert shown["retries"] == 1 and shown["failures"] == 0, shown
        assert shown["lastError"] == "attempt 1: HTTP 500 Internal Server Error"
        assert len(flaky.received) == len(states) + 1
        assert flaky.received[0].headers["ce-id"] == flaky.received[1].headers["ce-id"]  # the same event again
        hung = deliveries(kubectl, namespace, "stuck")["ops"]
        assert hung["delivered"] == 0 and hung["pending"] >= 1, hung  # still at it: it held nobody
