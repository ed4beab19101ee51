"""Events: coalesced as client-go's recorder coalesces them, posted by a few posters at once, and never
dropped for an outage or a full queue (issue 33: ~460 Events were unposted when a burst was Ready, and
a full queue dropped Events of objects that still existed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.runtime.core.pipeline import Observed
from operators.runtime.engine import events
from operators.runtime.engine.events import COMBINED, MAX_SIMILAR, POSTERS, WINDOW, Event, EventQueue, EventRecorder
from operators.runtime.kube.client import ApiError
from operators.runtime.serving.metrics import Metrics


def obj(name: str = "a1", uid: str = "u1") -> Observed:
    return Observed("App", "demo", name, uid, 1, {}, {}, {})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def queue(capacity: int = 100) -> tuple[EventQueue, Clock]:
    clock = Clock()
    return EventQueue(capacity, clock=clock, wall=lambda: f"t{clock.now:.0f}"), clock


def test_identical_events_waiting_are_one_event_with_their_count() -> None:
    q, clock = queue()
    assert not q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    clock.now += 2
    assert q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    assert q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    assert not q.add(Event(obj(), "Warning", "Provisioned", "ready"))  # another type: another Event
    assert not q.add(Event(obj("a2", "u2"), "Normal", "Provisioned", "ready"))  # another object
    first = q.take()
    assert first is not None and first.existing is None
    assert (first.pending.count, first.pending.first, first.pending.last, first.pending.since) == (3, "t1000", "t1002",
                                                                                                   1000.0)
    assert q.unposted == 5 and q.coalesced == 2 and len(q) == 2


def test_a_repeat_of_a_posted_event_updates_its_count_within_the_window_and_is_new_after() -> None:
    q, clock = queue()
    q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    delivery = q.take()
    assert delivery is not None
    q.posted(delivery, "a1.17f", 1)
    q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    repeat = q.take()
    assert repeat is not None and repeat.existing is not None
    assert (repeat.existing.name, repeat.existing.count, repeat.pending.count) == ("a1.17f", 1, 2)
    q.posted(repeat, "a1.17f", 3)
    clock.now += WINDOW + 1
    q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    late = q.take()
    assert late is not None and late.existing is None  # older than the window: a new Event
    q.posted(late, "a1.9zz", 1)
    assert q.unposted == 0 and q.idle


def test_a_repeat_recorded_while_its_event_is_being_posted_waits_to_update_it() -> None:
    q, _ = queue()
    q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    flying = q.take()
    assert flying is not None
    q.add(Event(obj(), "Normal", "Provisioned", "ready"))
    assert q.take() is None  # not a second POST of the same Event while the first is in flight
    q.posted(flying, "a1.1", 1)
    repeat = q.take()
    assert repeat is not None and repeat.existing is not None and repeat.existing.name == "a1.1"


def test_from_the_tenth_distinct_message_of_an_object_and_reason_messages_are_combined() -> None:
    q, clock = queue()
    for i in range(MAX_SIMILAR + 5):
        q.add(Event(obj(), "Warning", "Failed", f"attempt {i} failed"))
        clock.now += 1
    waiting = []
    while (delivery := q.take()) is not None:
        waiting.append(delivery.pending)
    assert [p.event.message for p in waiting[:MAX_SIMILAR - 1]] == [
        f"attempt {i} failed" for i in range(MAX_SIMILAR - 1)]
    (combined,) = waiting[MAX_SIMILAR - 1:]
    assert combined.event.message == f"{COMBINED}attempt {MAX_SIMILAR + 4} failed" and combined.count == 6


def test_beyond_the_capacity_events_merge_by_object_type_and_reason_and_none_is_dropped() -> None:
    q, _ = queue(capacity=2)
    q.add(Event(obj("a1", "u1"), "Normal", "Provisioned", "ready"))
    q.add(Event(obj("a2", "u2"), "Normal", "Provisioned", "ready"))
    q.add(Event(obj("a1", "u1"), "Normal", "Provisioned", "ready again"))  # full: joins a1's waiting Event
    q.add(Event(obj("a3", "u3"), "Normal", "Provisioned", "ready"))  # nothing of a3 waits: admitted, not dropped
    assert len(q) == 3 and q.unposted == 4
    taken = []
    while (delivery := q.take()) is not None:
        taken.append((delivery.pending.event.obj.name, delivery.pending.event.message, delivery.pending.count))
    assert taken == [("a1", f"{COMBINED}ready again", 2), ("a2", "ready", 1), ("a3", "ready", 1)]


class FakeKube:
    """Answers Events as the API server does; fails the first `outages` requests with a 503, and holds
    every request until `release_at` are in flight at once (to see that they are)."""

    def __init__(self, outages: int = 0, release_at: int = 1) -> None:
        self.outages = outages
        self.release_at = release_at
        self.hold = asyncio.Event()
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.flying = self.most_flying = 0
        self.gone: set[str] = set()

    async def request(self, method: str, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.flying += 1
        self.most_flying = max(self.most_flying, self.flying)
        if self.flying >= self.release_at:
            self.hold.set()
        try:
            await self.hold.wait()
            if self.outages:
                self.outages -= 1
                raise ApiError(503, "etcd is down")
            self.requests.append((method, path, body))
            if method == "PATCH" and path.rsplit("/", 1)[1] in self.gone:
                raise ApiError(404, f'events "{path.rsplit("/", 1)[1]}" not found')
            return {"metadata": {"name": f"{body.get('involvedObject', {}).get('name')}.{len(self.requests)}"}}
        finally:
            self.flying -= 1


def test_an_outage_is_retried_until_the_event_is_posted_never_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "RETRY_FIRST", 0.01)
    kube, metrics = FakeKube(outages=3), Metrics()

    async def scenario() -> None:
        recorder = EventRecorder(kube, metrics, "r1")  # type: ignore[arg-type]
        task = asyncio.create_task(recorder.run())
        recorder.record(obj(), "Normal", "Provisioned", "ready")
        await recorder.drain()
        assert recorder.queue.unposted == 0
        task.cancel()

    asyncio.run(scenario())
    assert [(m, p) for m, p, _ in kube.requests] == [("POST", "/api/v1/namespaces/demo/events")]
    assert metrics.value("stead_events_posted_total") == 1 and metrics.value("stead_events_dropped_total") == 0
    assert metrics.value("stead_event_lag_seconds_count") == 1 and metrics.value("stead_event_lag_max_seconds") > 0


def test_repeats_update_the_posted_events_count_and_an_expired_one_is_posted_again() -> None:
    kube, metrics = FakeKube(), Metrics()

    async def scenario() -> None:
        recorder = EventRecorder(kube, metrics, "r1")  # type: ignore[arg-type]
        task = asyncio.create_task(recorder.run())
        recorder.record(obj(), "Normal", "Provisioned", "ready")
        await recorder.drain()
        recorder.record(obj(), "Normal", "Provisioned", "ready")
        recorder.record(obj(), "Normal", "Provisioned", "ready")
        await recorder.drain()
        kube.gone.add("a1.1")  # the API server let it expire
        recorder.record(obj(), "Normal", "Provisioned", "ready")
        await recorder.drain()
        task.cancel()

    asyncio.run(scenario())
    assert [(m, p, b.get("count")) for m, p, b in kube.requests] == [
        ("POST", "/api/v1/namespaces/demo/events", 1),
        ("PATCH", "/api/v1/namespaces/demo/events/a1.1", 3),
        ("PATCH", "/api/v1/namespaces/demo/events/a1.1", 4),
        ("POST", "/api/v1/namespaces/demo/events", 1)]
    assert metrics.value("stead_events_coalesced_total") == 1  # the second of the two that waited together
    assert metrics.value("stead_events_updated_total") == 1 and metrics.value("stead_events_posted_total") == 2


def test_a_burst_is_posted_by_several_posters_at_once() -> None:
    kube, metrics = FakeKube(release_at=POSTERS), Metrics()

    async def scenario() -> None:
        recorder = EventRecorder(kube, metrics, "r1")  # type: ignore[arg-type]
        task = asyncio.create_task(recorder.run())
        for i in range(50):
            recorder.record(obj(f"a{i}", f"u{i}"), "Normal", "Provisioned", "ready")
        await recorder.drain()  # one poster at a time would never see its request answered
        task.cancel()

    asyncio.run(scenario())
    assert kube.most_flying == POSTERS > 1 and len(kube.requests) == 50
    assert metrics.value("stead_events_recorded_total") == 50 and metrics.value("stead_events_unposted") == 0
