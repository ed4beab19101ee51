"""Kubernetes Events for every visible transition and failure, posted off the hot path.

Recording never waits for the API server: events go to a bounded queue that one task drains.
A full queue drops the event and counts it, because an Event is a convenience for humans and
must never slow down or break reconciliation (status carries the facts; Events expire).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from operators import API_VERSION
from operators.runtime.core.pipeline import Observed
from operators.runtime.kube.client import ApiError, KubeClient, core_path
from operators.runtime.kube.events import event_body
from operators.runtime.serving.metrics import Metrics

log = logging.getLogger(__name__)
MAX_MESSAGE = 1024
CORE_KINDS = {"Namespace": "v1"}
"""Kubernetes' own kinds Stead posts Events about (an App skipped in a namespace being deleted), and
their apiVersion; every other kind is Stead's."""


@dataclass(frozen=True)
class Event:
    obj: Observed
    type: str  # Normal or Warning
    reason: str
    message: str


def namespace_going(error: BaseException) -> bool:
    """Whether the API server refused an Event because its namespace is being deleted, or is gone."""
    if not isinstance(error, ApiError):
        return False
    return (error.status == 403 and "being terminated" in error.message) or (
        error.status == 404 and "namespaces" in error.message)


class EventRecorder:
    """Queues Events and posts them as core/v1 Events from one background task."""

    def __init__(self, kube: KubeClient, metrics: Metrics, replica: str, capacity: int = 10_000) -> None:
        self._kube = kube
        self._metrics = metrics
        self._replica = replica
        self._queue: asyncio.Queue[Event] = asyncio.Queue(capacity)

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        try:
            self._queue.put_nowait(Event(obj, type_, reason, message[:MAX_MESSAGE]))
        except asyncio.QueueFull:
            self._metrics.inc("stead_events_dropped_total")

    async def run(self) -> None:
        """Post queued events until cancelled."""
        while True:
            event = await self._queue.get()
            try:
                await self._post(event)
                self._metrics.inc("stead_events_posted_total")
            except (ApiError, OSError, TimeoutError) as error:
                # a namespace being deleted takes no new Events: one line per object of it, at each
                # deletion, said nothing wrong (its objects are going, and their Events with them)
                level = logging.DEBUG if namespace_going(error) else logging.WARNING
                log.log(level, "event %s for %s/%s not posted: %s", event.reason, event.obj.namespace,
                        event.obj.name, error)
            finally:
                self._queue.task_done()

    async def drain(self, grace: float = 5.0) -> None:
        """Wait (bounded) until queued events are posted; used at shutdown."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace)

    async def _post(self, event: Event) -> None:
        obj = event.obj
        # a cluster-scoped object's Events go to `default` (the API server allows no other namespace there)
        namespace = obj.namespace or "default"
        involved = {"apiVersion": CORE_KINDS.get(obj.kind, API_VERSION), "kind": obj.kind, "name": obj.name,
                    "namespace": obj.namespace,
                    "uid": obj.uid}
        body = event_body(involved, namespace, event.type, event.reason, event.message, self._replica)
        await self._kube.request("POST", core_path("events", namespace), body)
