"""Kubernetes Events for every visible transition and failure, posted off the hot path, coalesced
as Kubernetes' own recorders coalesce them, and never dropped while their object can take them.

Recording never waits for the API server: `EventRecorder.record` puts the Event in an `EventQueue`
(no I/O, a few dict operations) and a few poster tasks post it. Issue 33 saw a burst leave ~460
Events unposted when every object was Ready (one poster, on the reconcilers' busy connections), and
a full queue dropped the rest. Now:

- **Coalesced as client-go's EventRecorder does** (its `EventCorrelator`): an Event identical to one
  still queued (same object, type, reason, message) adds to that one's count; identical to one posted
  within `WINDOW` (client-go's 10 minutes), it updates the posted Event's `count`, `lastTimestamp`
  and message (a PATCH, as client-go's, and as events.k8s.io's `series` counts repeats) instead of
  posting another; from the `MAX_SIMILAR`-th (10) distinct message of one object, type and reason
  within `WINDOW`, the messages are combined into one Event prefixed `COMBINED`, as client-go's
  `EventAggregator` does. Posted Events are remembered for the last `REMEMBERED` keys (client-go's
  LRU size).
- **Posted within a bound**: `POSTERS` tasks post at once, on connections of their own (the process
  gives the recorder its own client), so Events do not queue behind the reconcilers' writes. The
  lag from the record (just after the status write) to the API server's answer is observed
  (`stead_event_lag_seconds`, and its maximum `stead_event_lag_max_seconds`).
- **Never lost while the object can take Events**: an outage (no answer, 429, 5xx) is retried with
  backoff for as long as the operator runs, never dropped; an Event is dropped (counted in
  `stead_events_dropped_total`) only when the API server refuses it for good: its namespace is being
  deleted or gone, this replica no longer owns the object's project, or the Event is invalid.
- **Memory is bounded without dropping**: up to `capacity` Events wait as they are. Beyond it, an
  Event merges into the waiting Event of the same object, type and reason (its message combined,
  as above) and only an object/type/reason with nothing waiting adds one: the queue then grows with
  the objects the operator holds (one entry per object, type and reason, each at most
  `MAX_MESSAGE` characters), never with the rate at which Events come. Reconciliation is never
  slowed: `record` never waits.

Events still queued when the operator stops are posted within `drain`'s grace, then lost (the
next operator posts its own as it reconciles again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Histogram

from operators import API_VERSION
from operators.runtime.core.clock import utc_now
from operators.runtime.core.pipeline import Observed
from operators.runtime.kube.client import ApiError, KubeClient, core_path
from operators.runtime.kube.events import event_body
from operators.runtime.serving.metrics import Metrics

log = logging.getLogger(__name__)
MAX_MESSAGE = 1024
CORE_KINDS = {"Namespace": "v1"}
"""Kubernetes' own kinds Stead posts Events about (an App skipped in a namespace being deleted), and
their apiVersion; every other kind is Stead's."""
WINDOW = 600.0
"""Seconds within which a repeated Event counts on the one already posted (client-go's
`defaultAggregateIntervalInSeconds`), and within which similar messages are counted."""
MAX_SIMILAR = 10
"""Distinct messages of one object, type and reason within `WINDOW` from which on they are combined
(client-go's `defaultAggregateMaxEvents`)."""
COMBINED = "(combined from similar events): "
REMEMBERED = 4096
"""Posted Events (and similar-message counts) remembered, least recently used first out (client-go's
`maxLruCacheEntries`)."""
POSTERS = 4
"""Events posted at once."""
RETRY_FIRST, RETRY_MAX = 0.5, 30.0
"""Backoff of an Event whose post met an outage: doubling from the first to the max, never giving up."""
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

Similar = tuple[str, str, str, str, str, str]
"""(kind, namespace, name, uid, type, reason): the Events client-go aggregates."""
Key = tuple[Similar, str]
"""An Event's identity: its similar key and its message (`COMBINED` for combined messages)."""


@dataclass(frozen=True)
class Event:
    obj: Observed
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class Pending:
    """Occurrences of one Event not yet on the API server."""

    event: Event
    count: int
    since: float
    """Monotonic time of the oldest occurrence not yet posted: the lag is measured from it."""
    first: str
    last: str
    """Wall times (RFC 3339) of the first and latest occurrence: the Event's timestamps."""


@dataclass
class Posted:
    """An Event on the API server: its name and count, to update it on a repeat."""

    name: str
    count: int
    at: float


@dataclass(frozen=True)
class Delivery:
    """What a poster does next: post `pending` as a new Event, or add it to `existing`."""

    key: Key
    pending: Pending
    existing: Posted | None


def similar_key(event: Event) -> Similar:
    obj = event.obj
    return (obj.kind, obj.namespace, obj.name, obj.uid, event.type, event.reason)


class EventQueue:
    """The Events waiting to be posted, coalesced (see the module's docstring); no I/O, the clock given."""

    def __init__(self, capacity: int = 10_000, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], str] = utc_now) -> None:
        self.capacity = capacity
        self._clock = clock
        self._wall = wall
        self._pending: OrderedDict[Key, Pending] = OrderedDict()
        self._waiting: dict[Similar, Key] = {}
        """Similar key -> the key of its latest waiting Event (what an Event beyond the capacity joins)."""
        self._flying: set[Key] = set()
        self._posted: OrderedDict[Key, Posted] = OrderedDict()
        self._messages: OrderedDict[Similar, tuple[float, set[int]]] = OrderedDict()
        self.unposted = 0
        """Occurrences recorded and not yet on the API server (waiting or being posted)."""
        self.coalesced = 0
        """Occurrences that joined a waiting Event instead of being one of their own."""

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def idle(self) -> bool:
        return not self._pending and not self._flying

    def add(self, event: Event) -> bool:
        """One occurrence of `event`; True if it joined a waiting Event (coalesced)."""
        now, wall = self._clock(), self._wall()
        similar = similar_key(event)
        if self._similar_many(similar, event.message, now):
            event = Event(event.obj, event.type, event.reason, COMBINED + event.message)
            key: Key = (similar, COMBINED)
        else:
            key = (similar, event.message)
        self.unposted += 1
        pending = self._pending.get(key)
        if pending is None and len(self._pending) >= self.capacity and similar in self._waiting:
            key = self._waiting[similar]
            pending = self._pending[key]
            if not event.message.startswith(COMBINED):
                event = Event(event.obj, event.type, event.reason, COMBINED + event.message)
        if pending is not None:
            pending.event, pending.last = event, wall
            pending.count += 1
            self.coalesced += 1
            return True
        self._pending[key] = Pending(event, 1, now, wall, wall)
        self._waiting[similar] = key
        return False

    def take(self) -> Delivery | None:
        """The oldest waiting Event not being posted already (an Event is posted by one poster at a
        time, so that a repeat updates it rather than posting a second), or None."""
        for key in self._pending:
            if key not in self._flying:
                break
        else:
            return None
        pending = self._pending.pop(key)
        if self._waiting.get(key[0]) == key:
            del self._waiting[key[0]]
        self._flying.add(key)
        existing = self._posted.get(key)
        if existing is not None and self._clock() - existing.at > WINDOW:
            existing = None
        return Delivery(key, pending, existing)

    def posted(self, delivery: Delivery, name: str, count: int) -> None:
        """`delivery` is on the API server, as the Event `name` with `count` occurrences."""
        self._flying.discard(delivery.key)
        self.unposted -= delivery.pending.count
        self._posted[delivery.key] = Posted(name, count, self._clock())
        self._posted.move_to_end(delivery.key)
        while len(self._posted) > REMEMBERED:
            self._posted.popitem(last=False)

    def gone(self, delivery: Delivery) -> None:
        """`delivery`'s Event is not posted, for good (refused)."""
        self._flying.discard(delivery.key)
        self.unposted -= delivery.pending.count
        self._posted.pop(delivery.key, None)

    def forget(self, key: Key) -> None:
        """The Event posted for `key` is gone (expired): a repeat posts a new one."""
        self._posted.pop(key, None)

    def _similar_many(self, similar: Similar, message: str, now: float) -> bool:
        """Whether `similar` has had `MAX_SIMILAR` distinct messages or more, none more than `WINDOW`
        after the one before (as client-go's aggregator: from then on its messages are combined)."""
        last, messages = self._messages.get(similar, (now, set[int]()))
        if now - last > WINDOW:
            messages = set[int]()
        if len(messages) < MAX_SIMILAR:
            messages.add(hash(message))  # hashes: a set of 10 per remembered key, not 10 messages
        self._messages[similar] = (now, messages)
        self._messages.move_to_end(similar)
        while len(self._messages) > REMEMBERED:
            self._messages.popitem(last=False)
        return len(messages) >= MAX_SIMILAR


def namespace_going(error: BaseException) -> bool:
    """Whether the API server refused an Event because its namespace is being deleted, or is gone."""
    if not isinstance(error, ApiError):
        return False
    return (error.status == 403 and "being terminated" in error.message) or (
        error.status == 404 and "namespaces" in error.message)


def retriable(error: BaseException) -> bool:
    """An outage (no answer, 429, 5xx): the Event is posted again later, never dropped for it."""
    if isinstance(error, ApiError):
        return error.status == 0 or error.status == 429 or error.status >= 500
    return isinstance(error, OSError | TimeoutError)


class EventRecorder:
    """Queues Events and posts them as core/v1 Events from `POSTERS` background tasks."""

    def __init__(self, kube: KubeClient, metrics: Metrics, replica: str, capacity: int = 10_000,
                 posters: int = POSTERS) -> None:
        self._kube = kube
        self._metrics = metrics
        self._replica = replica
        self._posters = posters
        self.queue = EventQueue(capacity)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._max_lag = 0.0
        self._lag = Histogram("stead_event_lag_seconds", "Time from an Event's record (just after the status "
                              "write it tells of) to the API server's answer to its post.",
                              registry=metrics.registry, buckets=LAG_BUCKETS)
        metrics.gauge("stead_event_lag_max_seconds", "The longest lag of an Event so far (see "
                      "stead_event_lag_seconds).", lambda: self._max_lag)
        metrics.gauge("stead_events_unposted", "Event occurrences recorded and not yet on the API server.",
                      lambda: self.queue.unposted)

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        if self.queue.add(Event(obj, type_, reason, message[:MAX_MESSAGE])):
            self._metrics.inc("stead_events_coalesced_total")
        self._metrics.inc("stead_events_recorded_total")
        self._idle.clear()
        self._wake.set()

    async def run(self) -> None:
        """Post queued events until cancelled."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self._posters):
                group.create_task(self._poster())

    async def drain(self, grace: float = 5.0) -> None:
        """Wait (bounded) until queued events are posted; used at shutdown."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)

    async def _poster(self) -> None:
        while True:
            delivery = self.queue.take()
            if delivery is None:
                if self.queue.idle:
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._deliver(delivery)
            self._wake.set()  # a repeat of this Event may have waited for it to be posted

    async def _deliver(self, delivery: Delivery) -> None:
        delay = RETRY_FIRST
        while True:
            try:
                name, count = await self._send(delivery)
            except Exception as error:
                if retriable(error):
                    log.debug("event %s for %s/%s not posted yet (retried in %.1fs): %s", delivery.pending.event.reason,
                              delivery.pending.event.obj.namespace, delivery.pending.event.obj.name, delay, error)
                    await asyncio.sleep(delay)  # a backoff, not a wait for something
                    delay = min(RETRY_MAX, delay * 2)
                    continue
                self._refused(delivery, error)
                return
            self.queue.posted(delivery, name, count)
            lag = time.monotonic() - delivery.pending.since
            self._max_lag = max(self._max_lag, lag)
            self._lag.observe(lag)
            return

    async def _send(self, delivery: Delivery) -> tuple[str, int]:
        """Post the Event, or add its occurrences to the one posted before: (its name, its count)."""
        pending, existing = delivery.pending, delivery.existing
        event, obj = pending.event, pending.event.obj
        namespace = obj.namespace or "default"  # a cluster-scoped object's Events go to `default`
        if existing is not None:
            count = existing.count + pending.count
            try:
                await self._kube.request("PATCH", core_path("events", namespace, existing.name),
                                         {"count": count, "lastTimestamp": pending.last, "message": event.message},
                                         content_type="application/merge-patch+json")
            except ApiError as error:
                if error.status != 404:
                    raise
                self.queue.forget(delivery.key)  # expired (the API server keeps Events an hour): a new one
            else:
                self._metrics.inc("stead_events_updated_total")
                return existing.name, count
        involved = {"apiVersion": CORE_KINDS.get(obj.kind, API_VERSION), "kind": obj.kind, "name": obj.name,
                    "namespace": obj.namespace, "uid": obj.uid}
        body = event_body(involved, namespace, event.type, event.reason, event.message, self._replica,
                          first=pending.first, last=pending.last, count=pending.count)
        answer = await self._kube.request("POST", core_path("events", namespace), body)
        self._metrics.inc("stead_events_posted_total")
        return str((answer.get("metadata") or {}).get("name") or ""), pending.count

    def _refused(self, delivery: Delivery, error: BaseException) -> None:
        """Refused for good: its namespace is going, the project is another replica's, or it is invalid."""
        self.queue.gone(delivery)
        self._metrics.inc("stead_events_dropped_total", float(delivery.pending.count))
        event = delivery.pending.event
        # a namespace being deleted takes no new Events: one line per object of it, at each
        # deletion, said nothing wrong (its objects are going, and their Events with them)
        level = logging.DEBUG if namespace_going(error) else logging.WARNING
        log.log(level, "event %s for %s/%s not posted: %s", event.reason, event.obj.namespace, event.obj.name, error)
