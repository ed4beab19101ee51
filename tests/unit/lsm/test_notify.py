"""Notifications (operators.lsm.notify): the CloudEvents, the filters, the masking, the egress rule, and the
bounds that keep a slow or hostile endpoint from holding the operator, against misbehaving loopback servers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from operators.lsm.models import LogEntry, Subscription
from operators.lsm.notify import (
    DeliveryFailed,
    Instance,
    Limits,
    Notifier,
    egress_problems,
    events_for,
    http_message,
    mask_url,
    post,
    scrub,
    wanted,
)
from pipelines.executors.egress import EgressPolicy, EgressRefused
from tests.receiver import receiving

INSTANCE = Instance("shop", "db", "db-1", "uid-1")
CREATED = LogEntry.model_validate({"from": None, "to": "start", "trigger": "create", "version": 1,
                                   "time": "2026-01-01T00:00:00Z"})
FAILED = LogEntry.model_validate({"from": "creating", "to": "rejected", "trigger": "resource_based", "version": 3,
                                  "time": "2026-01-01T00:00:05Z", "error": True, "message": "deployment failed"})
LOOPBACK = EgressPolicy(allow=["127.0.0.0/8"])
FAST = Limits(timeout=0.5, body_seconds=0.5, body_bytes=4096, backoff=0.05, status_seconds=0.05)


def sub(**fields: Any) -> Subscription:
    return Subscription.model_validate({"name": "ops", "url": "http://127.0.0.1:9/events", **fields})


# --- events ---------------------------------------------------------------------------------------


def test_a_transfer_is_a_transfer_event_and_a_state_event_and_an_error_path_a_failure_too() -> None:
    events = events_for(INSTANCE, [CREATED, FAILED])
    assert [(e["type"], e["steadlevel"]) for e in events] == [
        ("dev.stead.service.transfer", "info"), ("dev.stead.service.state", "info"),
        ("dev.stead.service.transfer", "warning"), ("dev.stead.service.state", "info"),
        ("dev.stead.service.failure", "error")]
    first = events[0]
    assert first["specversion"] == "1.0" and first["source"] == "/namespaces/shop/serviceentities/db"
    assert first["subject"] == "db-1" and first["time"] == CREATED.time
    assert first["data"] == {"namespace": "shop", "entity": "db", "instance": "db-1", "from": None, "to": "start",
                             "trigger": "create", "version": 1, "error": False, "message": None, "level": "info"}
    assert len({e["id"] for e in events}) == 5  # unique, and the same when a reconcile sends them again
    assert [e["id"] for e in events_for(INSTANCE, [CREATED, FAILED])] == [e["id"] for e in events]


def test_a_subscription_takes_the_types_it_lists_at_its_level_or_above() -> None:
    events = events_for(INSTANCE, [CREATED, FAILED])
    kinds = lambda s: [e["type"].rsplit(".", 1)[1] for e in events if wanted(s, e)]  # noqa: E731
    assert kinds(sub()) == ["transfer", "state", "transfer", "state", "failure"]
    assert kinds(sub(types=["state"])) == ["state", "state"]
    assert kinds(sub(minLevel="warning")) == ["transfer", "failure"]
    assert kinds(sub(minLevel="error", types=["transfer", "failure"])) == ["failure"]


def test_binary_mode_puts_attributes_in_ce_headers_and_structured_mode_the_whole_event_in_the_body() -> None:
    event = events_for(INSTANCE, [CREATED])[0]
    headers, body = http_message(event, "binary")
    assert headers["ce-specversion"] == "1.0" and headers["ce-type"] == "dev.stead.service.transfer"
    assert headers["ce-id"] == event["id"] and headers["ce-subject"] == "db-1"
    assert headers["Content-Type"] == "application/json" and json.loads(body) == event["data"]
    headers, body = http_message(event, "structured")
    assert headers == {"Content-Type": "application/cloudevents+json; charset=utf-8"}
    assert json.loads(body) == event


def test_credentials_in_a_url_are_masked_and_scrubbed_from_errors() -> None:
    url = "https://bot:s3cret@hooks.example.com/in?token=abc123&x=1"
    assert mask_url(url) == "https://***@hooks.example.com/in?token=***&x=***"
    assert mask_url("http://example.com/a") == "http://example.com/a"
    text = scrub(f"failed to POST {url}: s3cret rejected, token abc123", url)
    assert "s3cret" not in text and "abc123" not in text and "hooks.example.com" in text


def test_a_url_that_is_not_http_is_refused_by_the_schema_naming_the_field() -> None:
    with pytest.raises(ValueError, match="url"):
        sub(url="file:///etc/passwd")


def test_the_egress_rule_of_http_tasks_refuses_loopback_and_private_endpoints_naming_the_rule() -> None:
    subs = [sub(url="http://127.0.0.1:8080/x"), sub(name="b", url="http://93.184.216.34/"),
            sub(name="c", url="http://[::1]/"), sub(name="d", url="http://10.0.0.5/")]
    problems = asyncio.run(egress_problems(subs, EgressPolicy(deny=["10.0.0.0/24"])))
    assert len(problems) == 3
    assert problems[0].startswith("spec.notifications[0].url: refused to connect to 127.0.0.1: 127.0.0.1 is a "
                                  "loopback address, which http tasks and notifications may not reach")
    assert "--http-allow-networks" in problems[0]
    assert problems[1].startswith("spec.notifications[2].url") and "cluster's Service network" in problems[2]
    assert asyncio.run(egress_problems(subs[:1], EgressPolicy(allow=["127.0.0.0/8"]))) == []


# --- one delivery, against misbehaving servers ----------------------------------------------------


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    try:
        result: Any = call()
    except Exception as error:  # returned for the test to judge
        result = error
    return result, time.monotonic() - start


def send(url: str, policy: EgressPolicy = LOOPBACK) -> Callable[[], int]:
    return lambda: post(policy.opener(), url, {"Content-Type": "application/json"}, b"{}", FAST)


def test_a_hanging_or_slow_endpoint_fails_the_attempt_at_the_read_timeout() -> None:
    for answer in ("hang", "slow"):
        with receiving(answers=[answer], slow_seconds=5) as receiver:
            result, took = timed(send(receiver.url))
            assert isinstance(result, DeliveryFailed) and "timed out" in str(result), (answer, result)
            assert took < 2.0, (answer, took)
            assert len(receiver.received) == 1


def test_an_endless_or_dripping_body_is_not_read_beyond_its_bounds() -> None:
    with receiving(then="huge") as receiver:
        result, took = timed(send(receiver.url))
        assert result == 200 and took < 2.0
    assert receiver.huge_sent < 64 * 1024 * 1024  # it never got to send the whole of it
    with receiving(then="drip") as receiver:
        result, took = timed(send(receiver.url))
        assert result == 200 and FAST.body_seconds <= took < 2.0, took


def test_a_500_is_a_failed_attempt_and_a_refused_address_is_never_connected_to() -> None:
    with receiving(answers=["500"]) as receiver:
        result, _ = timed(send(receiver.url))
        assert isinstance(result, DeliveryFailed) and "HTTP 500" in str(result)
        assert send(receiver.url)() == 200
        result, _ = timed(send(receiver.url, EgressPolicy()))
        assert isinstance(result, EgressRefused) and "loopback" in str(result)
        assert len(receiver.received) == 2


# --- the notifier ---------------------------------------------------------------------------------


def run(test: Callable[[Notifier, dict[tuple[str, str], list[dict[str, Any]]]], Awaitable[None]],
        limits: Limits = FAST, policy: EgressPolicy = LOOPBACK) -> None:
    """Run `test` with a started notifier whose status writes are kept by entity."""
    written: dict[tuple[str, str], list[dict[str, Any]]] = {}

    async def main() -> None:
        notifier = Notifier(limits)

        async def write(namespace: str, entity: str, statuses: list[dict[str, Any]]) -> None:
            written[(namespace, entity)] = statuses

        notifier.begin(lambda url, headers, body: post(policy.opener(), url, headers, body, limits), write)
        try:
            await test(notifier, written)
        finally:
            await notifier.stop()

    asyncio.run(main())


async def until(check: Callable[[], Any], seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
    return value


def shown(written: Mapping[tuple[str, str], list[dict[str, Any]]], entity: str = "db") -> dict[str, Any]:
    statuses = written.get(("shop", entity)) or [{}]
    return statuses[0]


def test_publish_queues_without_io_and_the_endpoint_gets_the_wanted_events_in_order() -> None:
    with receiving() as receiver:
        async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
            start = time.monotonic()
            notifier.publish(INSTANCE, [sub(url=receiver.url, types=["state"])], [CREATED, FAILED])
            assert time.monotonic() - start < 0.05
            await until(lambda: shown(written).get("delivered") == 2)
            assert shown(written) == {"name": "ops", "url": receiver.url, "delivered": 2, "pending": 0, "retries": 0,
                                      "failures": 0, "dropped": 0, "lastDelivered": shown(written)["lastDelivered"]}

        run(test)
    assert [r.headers["ce-type"] for r in receiver.received] == ["dev.stead.service.state"] * 2
    assert [json.loads(r.body)["to"] for r in receiver.received] == ["start", "rejected"]


def test_a_500_then_ok_endpoint_gets_the_event_after_retries_and_status_shows_them() -> None:
    with receiving(answers=["500", "500"]) as receiver:
        async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
            notifier.publish(INSTANCE, [sub(url=receiver.url, types=["transfer"])], [CREATED])
            await until(lambda: shown(written).get("delivered") == 1)
            assert shown(written)["retries"] == 2 and shown(written)["failures"] == 0
            assert shown(written)["lastError"] == "attempt 2: HTTP 500 Internal Server Error"

        run(test)
    assert len(receiver.received) == 3 and len({r.headers["ce-id"] for r in receiver.received}) == 1


def test_an_event_every_attempt_of_which_fails_is_counted_a_failure_and_the_next_one_goes() -> None:
    with receiving(answers=["500", "500"]) as receiver:
        async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
            notifier.publish(INSTANCE, [sub(url=receiver.url, types=["transfer"])], [CREATED, FAILED])
            await until(lambda: shown(written).get("delivered") == 1)
            assert shown(written)["failures"] == 1 and shown(written)["retries"] == 1

        run(test, limits=Limits(**{**FAST.__dict__, "attempts": 2}))
    assert [json.loads(r.body)["to"] for r in receiver.received] == ["start", "start", "rejected"]


def test_a_full_queue_drops_its_oldest_events_and_says_so() -> None:
    with receiving(answers=["hang"]) as receiver:
        async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
            subscription = sub(url=receiver.url, types=["transfer"])
            notifier.publish(INSTANCE, [subscription], [CREATED])
            await until(lambda: receiver.received)  # the first one is being sent (and hangs)
            entries = [CREATED.model_copy(update={"version": v}) for v in range(2, 12)]
            notifier.publish(INSTANCE, [subscription], entries)
            await until(lambda: shown(written).get("dropped") == 7)
            assert shown(written)["pending"] == 4  # 3 queued, one being sent
            await until(lambda: shown(written).get("delivered") == 4)  # the first on its retry, then 9 to 11

        run(test, limits=Limits(**{**FAST.__dict__, "queue": 3}))
    assert [json.loads(r.body)["version"] for r in receiver.received] == [1, 1, 9, 10, 11]


def test_a_hanging_endpoint_does_not_delay_another_subscriptions_events() -> None:
    with receiving(then="hang") as stuck, receiving() as fine:
        async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
            notifier.publish(Instance("shop", "slow", "a", "u-a"), [sub(url=stuck.url)], [CREATED])
            await until(lambda: stuck.received)
            start = time.monotonic()
            notifier.publish(INSTANCE, [sub(url=fine.url, types=["state"])], [CREATED])
            await until(lambda: fine.received)
            assert time.monotonic() - start < FAST.timeout  # not after the hanging one's timeout

        run(test, limits=Limits(**{**FAST.__dict__, "timeout": 3.0}))


def test_a_refused_endpoint_is_a_failure_naming_the_rule_not_retried_and_its_credentials_masked() -> None:
    async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
        notifier.publish(INSTANCE, [sub(url="http://bot:pw@127.0.0.1:9/in?token=t0k")], [CREATED])
        await until(lambda: shown(written).get("failures") == 2)
        status = shown(written)
        assert status["retries"] == 0 and status["url"] == "http://***@127.0.0.1:9/in?token=***"
        assert "which http steps may not reach" in status["lastError"] and "not retried" in status["lastError"]
        assert "pw" not in json.dumps(status) and "t0k" not in json.dumps(status)

    run(test, policy=EgressPolicy())


def test_a_subscription_removed_from_the_entity_goes_from_its_status() -> None:
    with receiving() as receiver:
        async def test(notifier: Notifier, written: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
            notifier.publish(INSTANCE, [sub(url=receiver.url), sub(name="b", url=receiver.url)], [CREATED])
            await until(lambda: [s.get("delivered") for s in written.get(("shop", "db"), [])] == [2, 2])
            notifier.publish(INSTANCE, [sub(name="b", url=receiver.url)], [FAILED])
            await until(lambda: [(s["name"], s["delivered"]) for s in written[("shop", "db")]] == [("b", 5)])

        run(test)
