"""Notifications: an entity's subscriptions receive its instances' transfers, state changes and failures
as CloudEvents over HTTP (docs/services.md#notifications).

Why a field of the ServiceEntity (`spec.notifications`) and not a kind of its own: a subscription is
part of a catalog entry (who hears about this service), lives in git beside it, and is reviewed with
it; a field needs no new kind, CRD, RBAC or reconciler, and the entity's status is where its catalog
health is read already. A kind would let someone who may not edit the catalog subscribe; nobody asked.

The parts:

- pure: `events_for` turns executed transfers into CloudEvents (spec 1.0), `wanted` filters them by
  type and level, `http_message` encodes one in the binary or structured HTTP content mode, and
  `mask_url` hides credentials. Written by hand rather than with the `cloudevents` package: the HTTP
  binding is six headers and a JSON body, and the package (not in the image) would add a dependency
  for less code than its glue;
- `Notifier`, the lsm domain's addon: the pipeline hands it events (`publish`, which never blocks
  nor does I/O), and it delivers them off the handler path. Each subscription has a queue (bounded:
  the oldest event is dropped and counted when it is full) and one delivery at a time (its events
  arrive in order); deliveries run in a small thread pool (bounded concurrency) through the egress
  rule of http tasks (`pipelines.executors.egress`: checked on the connected peer), with connect and
  read timeouts, a bound on the response body read and a deadline on reading it. A failed attempt is
  retried with exponential backoff, up to `Limits.attempts`; a refusal by the egress rule is not
  retried. The counts are written to the entity's `status.notifications` at most once a second.
  One gap: the status line and headers are read with the read timeout per read (http.client's), so an
  endpoint that trickles them a byte at a time holds one worker thread longer than `timeout`; it
  never holds the handler path, nor more than its subscription's worker and one of the pool's threads.

Counts are this replica's since it started (an operator restart starts them again; an event not yet
delivered when the operator stops is lost: delivery is at most once across restarts). Each event's
`id` is derived from the transfer, so that a receiver can drop the duplicate a retried reconcile sends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http.client
import ipaddress
import json
import logging
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from operators.lsm.models import (
    SERVICE_ENTITY,
    LogEntry,
    NotificationLevel,
    NotificationType,
    Subscription,
    SubscriptionStatus,
)
from operators.runtime import ProcessServices
from pipelines.executors.egress import HTTP_ALLOW_HINT, EgressPolicy, EgressRefused

log = logging.getLogger(__name__)

EVENT_TYPE_PREFIX = "dev.stead.service."
LEVELS: tuple[NotificationLevel, ...] = ("info", "warning", "error")

# --- events (pure) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """The instance whose transfers are sent."""

    namespace: str
    entity: str
    name: str
    uid: str


def _event(instance: Instance, entry: LogEntry, kind: NotificationType, level: NotificationLevel) -> dict[str, Any]:
    data = {"namespace": instance.namespace, "entity": instance.entity, "instance": instance.name,
            "from": entry.from_, "to": entry.to, "trigger": entry.trigger, "version": entry.version,
            "error": entry.error, "message": entry.message, "level": level}
    digest = hashlib.sha256(json.dumps([instance.uid, kind, entry.model_dump(by_alias=True)], sort_keys=True)
                            .encode()).hexdigest()[:32]
    return {"specversion": "1.0", "id": digest, "type": EVENT_TYPE_PREFIX + kind,
            "source": f"/namespaces/{instance.namespace}/serviceentities/{instance.entity}",
            "subject": instance.name, "time": entry.time, "datacontenttype": "application/json",
            "steadlevel": level, "data": data}


def events_for(instance: Instance, transfers: Iterable[LogEntry]) -> list[dict[str, Any]]:
    """The CloudEvents executed transfers stand for: one `transfer` each, a `state` for each that changed
    the state, a `failure` for each that took its error path."""
    events = []
    for entry in transfers:
        events.append(_event(instance, entry, "transfer", "warning" if entry.error else "info"))
        if entry.from_ != entry.to:
            events.append(_event(instance, entry, "state", "info"))
        if entry.error:
            events.append(_event(instance, entry, "failure", "error"))
    return events


def wanted(subscription: Subscription, event: Mapping[str, Any]) -> bool:
    """Whether a subscription takes an event: its type is listed and its level is at least `minLevel`."""
    kind = str(event["type"]).removeprefix(EVENT_TYPE_PREFIX)
    return kind in subscription.types and LEVELS.index(event["steadlevel"]) >= LEVELS.index(subscription.min_level)


def http_message(event: Mapping[str, Any], mode: str) -> tuple[dict[str, str], bytes]:
    """The headers and body of one event in a CloudEvents HTTP content mode: binary (each attribute a
    `ce-` header, the data the body) or structured (the whole event, application/cloudevents+json)."""
    if mode == "structured":
        return ({"Content-Type": "application/cloudevents+json; charset=utf-8"},
                json.dumps(event, separators=(",", ":")).encode())
    headers = {f"ce-{key}": str(value) for key, value in event.items() if key not in ("data", "datacontenttype")}
    headers["Content-Type"] = str(event.get("datacontenttype") or "application/json")
    return headers, json.dumps(event.get("data"), separators=(",", ":")).encode()


def mask_url(url: str) -> str:
    """`url` with its credentials hidden: user and password (`***@`) and the query's values."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rpartition("@")[2]
        query = "&".join(f"{pair.partition('=')[0]}=***" for pair in parts.query.split("&")) if parts.query else ""
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return "(an invalid URL)"


def scrub(text: str, url: str) -> str:
    """An error's text with every credential of `url` replaced by its masked form."""
    parts = urlsplit(url)
    text = text.replace(url, mask_url(url))
    secrets = [parts.netloc.rpartition("@")[0] if "@" in parts.netloc else "", parts.password or ""]
    secrets += [pair.partition("=")[2] for pair in parts.query.split("&")]
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:  # shorter values would mask the text's own words, and are no secrets
            text = text.replace(secret, "***")
    return text


def refusal_message(index: int, host: str, why: str) -> str:
    """A subscription's URL the egress rule refuses, naming the rule and the operator's flag."""
    return (f"spec.notifications[{index}].url: refused to connect to {host}: {why}, which http tasks and "
            f"notifications may not reach (the operator's own ports, cloud metadata, the cluster's private "
            f"networks); {HTTP_ALLOW_HINT}")


async def egress_problems(subscriptions: Sequence[Subscription], policy: EgressPolicy,
                          resolve_seconds: float = 2.0) -> list[str]:
    """The subscriptions whose host (an address, or what a name resolves to now) the egress rule refuses.
    The rule is applied again at each connection, on its peer: this early check is for the condition."""
    problems = []
    loop = asyncio.get_running_loop()
    for index, subscription in enumerate(subscriptions):
        host = urlsplit(subscription.url).hostname or ""
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                found = await asyncio.wait_for(loop.getaddrinfo(host, None), resolve_seconds)
            except (OSError, TimeoutError):
                continue  # not resolvable now: the delivery says why
            addresses = sorted({str(info[4][0]) for info in found})
        for address in addresses:
            why = policy.refusal(address)
            if why is not None:
                problems.append(refusal_message(index, host, why))
                break
    return problems


# --- delivery -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """The bounds that keep a slow or hostile endpoint from holding the operator."""

    timeout: float = 5.0
    """Seconds for the connection, and for each read of the response."""
    body_seconds: float = 5.0
    """Seconds for reading the response's body, in all."""
    body_bytes: int = 64 * 1024
    """The most of a response's body read (the rest is never read)."""
    concurrency: int = 4
    """Deliveries at once, across all subscriptions (each subscription has one at a time)."""
    queue: int = 1000
    """Events queued per subscription; when full, the oldest is dropped and counted."""
    attempts: int = 5
    """Attempts per event (retries with backoff between them)."""
    backoff: float = 1.0
    """Seconds before the first retry; doubled for each next one."""
    backoff_max: float = 60.0
    status_seconds: float = 1.0
    """The least time between two writes of an entity's status.notifications."""


class DeliveryFailed(Exception):
    """An attempt that may succeed later: the endpoint answered an error, or could not be reached."""


def post(opener: urllib.request.OpenerDirector, url: str, headers: Mapping[str, str], body: bytes,
         limits: Limits) -> int:
    """POST one event (in a worker thread); the response's status. Raises EgressRefused or DeliveryFailed.
    Reads at most `limits.body_bytes` of the answer, and stops reading it at `limits.body_seconds`."""
    parts = urlsplit(url)
    headers = dict(headers)
    if "@" in parts.netloc:  # user:password@ is sent as basic authentication (urllib would take it for the host)
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        url = urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        response = opener.open(request, timeout=limits.timeout)
    except urllib.error.HTTPError as error:
        with contextlib.closing(error):
            _drain(error, limits)
        raise DeliveryFailed(f"HTTP {error.code} {error.reason}") from None
    except EgressRefused:
        raise
    except urllib.error.URLError as error:
        if isinstance(error.reason, EgressRefused):
            raise error.reason from None
        raise DeliveryFailed(str(error.reason)) from None
    except (OSError, http.client.HTTPException) as error:
        raise DeliveryFailed(f"{type(error).__name__}: {error}") from None
    with contextlib.closing(response):
        with contextlib.suppress(OSError, http.client.HTTPException):  # accepted: its answer is not ours to judge
            _drain(response, limits)
        return int(response.status)


def _drain(response: Any, limits: Limits) -> None:
    deadline = time.monotonic() + limits.body_seconds
    left = limits.body_bytes
    while left > 0 and time.monotonic() < deadline:
        chunk = response.read1(min(left, 8192))  # what has come: read() would wait for all of it
        if not chunk:
            return
        left -= len(chunk)


def backoff(attempt: int, limits: Limits) -> float:
    """Seconds before attempt `attempt + 1` (attempt counts from 1)."""
    return float(min(limits.backoff * 2 ** (attempt - 1), limits.backoff_max))


Poster = Callable[[str, Mapping[str, str], bytes], int]
"""Sends one event: (url, headers, body) -> the status. Runs in a worker thread."""


@dataclass
class Channel:
    """One subscription's queue, counts and worker."""

    namespace: str
    entity: str
    subscription: Subscription
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sending: bool = False
    delivered: int = 0
    last_delivered: str | None = None
    retries: int = 0
    failures: int = 0
    dropped: int = 0
    last_error: str | None = None
    task: asyncio.Task[None] | None = None

    def status(self) -> SubscriptionStatus:
        return SubscriptionStatus(name=self.subscription.name, url=mask_url(self.subscription.url),
                                  delivered=self.delivered, last_delivered=self.last_delivered,
                                  pending=len(self.queue) + int(self.sending), retries=self.retries,
                                  failures=self.failures, dropped=self.dropped, last_error=self.last_error)


StatusWriter = Callable[[str, str, list[dict[str, Any]]], Any]
"""Writes an entity's status.notifications: (namespace, entity, statuses) -> awaitable."""


class Notifier:
    """The lsm domain's addon that delivers notifications (see the module's docstring)."""

    name = "lsm-notifications"

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.channels: dict[tuple[str, str, str], Channel] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._poster: Poster | None = None
        self._write: StatusWriter | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._writer: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # the addon

    async def start(self, services: ProcessServices) -> None:
        policy = EgressPolicy(allow=services.runs.http_allow, deny=services.runs.service_cidrs)
        kube = services.kube

        async def write(namespace: str, entity: str, statuses: list[dict[str, Any]]) -> None:
            await kube.patch_status(SERVICE_ENTITY.plural, namespace, entity, {"notifications": statuses})

        self.begin(lambda url, headers, body: post(policy.opener(), url, headers, body, self.limits), write)

    def begin(self, poster: Poster, write: StatusWriter) -> None:
        """Start delivering with `poster` and writing counts with `write` (tests give their own)."""
        global ACTIVE
        self._poster, self._write = poster, write
        self._executor = ThreadPoolExecutor(self.limits.concurrency, thread_name_prefix="stead-notify")
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        ACTIVE = self

    async def stop(self) -> None:
        global ACTIVE
        if ACTIVE is self:
            ACTIVE = None
        tasks = [c.task for c in self.channels.values() if c.task is not None] + [self._writer]
        for task in tasks:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in tasks if t is not None), return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # the pipeline's side

    def publish(self, instance: Instance, subscriptions: Sequence[Subscription], transfers: Iterable[LogEntry]
                ) -> None:
        """Queue the events of executed transfers for the subscriptions that want them; never blocks."""
        current = {s.name for s in subscriptions}
        for key in [k for k in self.channels if k[:2] == (instance.namespace, instance.entity) and k[2] not in current]:
            self._retire(key)
        if not subscriptions:
            return
        events = events_for(instance, transfers)
        for subscription in subscriptions:
            channel = self._channel(instance.namespace, instance.entity, subscription)
            for event in events:
                if wanted(subscription, event):
                    if len(channel.queue) >= self.limits.queue:
                        channel.queue.popleft()
                        channel.dropped += 1
                    channel.queue.append(event)
                    channel.wake.set()
            self._mark(channel)

    def _channel(self, namespace: str, entity: str, subscription: Subscription) -> Channel:
        key = (namespace, entity, subscription.name)
        channel = self.channels.get(key)
        if channel is None:
            channel = self.channels[key] = Channel(namespace, entity, subscription)
            channel.task = asyncio.get_running_loop().create_task(self._deliver_loop(channel))
        channel.subscription = subscription
        return channel

    def _retire(self, key: tuple[str, str, str]) -> None:
        channel = self.channels.pop(key)
        if channel.task is not None:
            channel.task.cancel()
        self._dirty.add(key[:2])
        self._changed.set()

    def _mark(self, channel: Channel) -> None:
        self._dirty.add((channel.namespace, channel.entity))
        self._changed.set()

    # delivery

    async def _deliver_loop(self, channel: Channel) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not channel.queue:
                channel.wake.clear()
                await channel.wake.wait()
            event = channel.queue.popleft()
            channel.sending = True
            try:
                await self._deliver(loop, channel, event)
            finally:
                channel.sending = False
                self._mark(channel)

    async def _deliver(self, loop: asyncio.AbstractEventLoop, channel: Channel, event: Mapping[str, Any]) -> None:
        assert self._poster is not None
        for attempt in range(1, self.limits.attempts + 1):
            subscription = channel.subscription
            headers, body = http_message(event, subscription.mode)
            try:
                status = await loop.run_in_executor(self._executor, self._poster, subscription.url, headers, body)
                if not 200 <= status < 300:
                    raise DeliveryFailed(f"HTTP {status}")
            except EgressRefused as refused:
                channel.failures += 1
                channel.last_error = scrub(f"{refused} (not retried)", subscription.url)
                return
            except Exception as error:  # any failure of an attempt is the endpoint's: counted, retried
                channel.last_error = scrub(f"attempt {attempt}: {error}", subscription.url)
                if attempt == self.limits.attempts:
                    channel.failures += 1
                    return
                channel.retries += 1
                self._mark(channel)
                await asyncio.sleep(backoff(attempt, self.limits))
                continue
            channel.delivered += 1
            channel.last_delivered = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return

    # status

    def statuses(self, namespace: str, entity: str) -> list[dict[str, Any]]:
        """The entity's status.notifications, as written."""
        return [c.status().model_dump(by_alias=True, exclude_none=True)
                for key, c in sorted(self.channels.items()) if key[:2] == (namespace, entity)]

    async def _write_loop(self) -> None:
        assert self._write is not None
        while True:
            await self._changed.wait()
            self._changed.clear()
            dirty, self._dirty = self._dirty, set()
            for namespace, entity in sorted(dirty):
                try:
                    await self._write(namespace, entity, self.statuses(namespace, entity))
                except Exception as error:  # the entity may be gone: the next change writes again
                    log.debug("status.notifications of %s/%s not written: %s", namespace, entity, error)
            await asyncio.sleep(self.limits.status_seconds)


ACTIVE: Notifier | None = None
"""The process's running notifier (the addon sets it): the pipeline's steps reach it through `publish`,
as the runtime's step services know nothing of one domain's addon."""


def publish(instance: Instance, subscriptions: Sequence[Subscription], transfers: Sequence[LogEntry]) -> None:
    """Hand executed transfers to the running notifier, if any (none in tests of pure steps, or the API)."""
    if ACTIVE is not None and transfers and (subscriptions or any(k[:2] == (instance.namespace, instance.entity)
                                                                  for k in ACTIVE.channels)):
        ACTIVE.publish(instance, subscriptions, transfers)
