"""The work queue of one reconciler: one reconcile at a time per object, retries, cancellation.

- Per object, one reconcile at a time (its lock). Events arriving meanwhile coalesce into one
  waiter, which takes the freshest body when its turn comes (never a queue of old ones).
- A temporary failure schedules one retry per object, after an exponential backoff (`Backoff`), or,
  when the API server is down, once it answers again (`ApiHealth`: not the object's fault, so no
  backoff for it). A new body for the same generation is taken by the retry; a new spec starts
  again now.
- With a write guard (several replicas) each reconcile runs in a task of its own, which the
  hand-over's drain may cancel without cancelling the event's handler.

What the queue keeps of an object is in its `table.Tracked` record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from operators.runtime.core.pipeline import Observed, TemporaryError
from operators.runtime.engine.outage import ApiHealth
from operators.runtime.engine.reconciler.table import ObjectTable, Pending
from operators.runtime.kube.client import is_outage

log = logging.getLogger(__name__.rpartition(".")[0])  # the reconciler's one logger, whichever part writes

Turn = Callable[[str, Observed], Awaitable[None]]
"""What is done with an object when its turn comes (under its lock): the reconcile."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: `base`, doubling per attempt, capped."""

    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.base * 2 ** max(0, attempt - 1)))


DEFAULT_BACKOFF = Backoff()


class WorkQueue:
    """The queue of one kind's objects (`kind`: its name, for logs and metrics)."""

    def __init__(self, table: ObjectTable, kind: str, turn: Turn, *, backoff: Backoff,
                 count: Callable[[str], None]) -> None:
        self._table = table
        self._kind = kind
        self._turn = turn
        self._backoff = backoff
        self._count = count

    async def add(self, key: str, obj: Observed) -> None:
        """A new body of an object: taken by its scheduled retry when that is for the same generation,
        else reconciled now (a new spec starts again now, not at the old retry's time)."""
        record = self._table.get(key)
        pending = record.pending if record is not None else None
        if pending is not None:
            if pending.generation == obj.generation:
                pending.body = obj  # the scheduled retry will use the freshest body
                return
            self.forget(key)
        await self.process(key, obj)

    async def process(self, key: str, obj: Observed) -> None:
        """Give the object its turn under its lock, or, when a turn is already waiting, hand it the
        freshest body instead."""
        record = self._table.record(key)
        waiting = record.waiting is not None
        record.waiting = obj
        if waiting:
            return
        async with self.lock(key):
            record = self._table.record(key)
            latest = record.waiting if record.waiting is not None else obj
            record.waiting = None
            await self._turn(key, latest)
        self._table.tidy(key)

    def lock(self, key: str) -> asyncio.Lock:
        """The object's lock (one reconcile at a time)."""
        record = self._table.record(key)
        if record.lock is None:
            record.lock = asyncio.Lock()
        return record.lock

    async def cancellable(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in a task of its own, which `cancel` may cancel without cancelling our caller;
        re-raise what it raised."""
        task = asyncio.create_task(work)
        self._table.record(key).running = task
        try:
            await asyncio.wait([task])
        finally:
            record = self._table.get(key)
            if record is not None and record.running is task:
                record.running = None
                self._table.tidy(key)
        if not task.cancelled():
            task.result()  # re-raise what it raised

    async def cancel(self, keys: Iterable[str], grace: float) -> None:
        """Give the reconciles in flight of `keys` `grace` seconds to finish, then cancel those still
        running (and wait up to `grace` for them to stop)."""
        running = [task for key in keys if (record := self._table.get(key)) is not None
                   and (task := record.running) is not None and not task.done()]
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                self._count("stead_drain_cancelled_total")
                await asyncio.wait(late, timeout=grace)

    def retry(self, key: str, obj: Observed, error: TemporaryError, health: ApiHealth | None) -> None:
        """Reconcile `obj` again later: once the API server answers (`health`, for an outage), else
        after the backoff of its attempt (or the delay the error asks for)."""
        record = self._table.get(key)
        seen = record.seen if record is not None else None
        if seen is None or seen.uid != obj.uid:
            # Deleted (its DELETED event came while this reconcile ran, or its namespace went):
            # nothing is left to retry, and a timer for it would run until the operator stops.
            self._count("stead_retries_dropped_total")
            return
        if health is not None and is_outage(error):  # not the object's fault: no backoff for it
            health.report(error)
            log.debug("%s %s: %s (waiting for the API server)", self._kind, key, error.message)
            self._count("stead_outage_waits_total")
            self._schedule(key, obj, health.wait_up())
            return
        record = self._table.record(key)
        attempt = record.attempts = record.attempts + 1
        delay = error.delay if error.delay is not None else self._backoff.delay(attempt)
        if error.waiting:  # expected (a run in progress): not a failure, so not logged as a retry
            log.debug("%s %s: waiting: %s (checking again in %.1fs)", self._kind, key, error.message, delay)
            self._count("stead_waits_total")
        else:
            log.info("%s %s: %s (retry %d in %.1fs)", self._kind, key, error.message, attempt, delay)
            self._count("stead_retries_total")
        self._schedule(key, obj, asyncio.sleep(delay))  # the backoff itself, not a synchronisation

    def _schedule(self, key: str, obj: Observed, wait: Coroutine[Any, Any, None]) -> None:
        """Reconcile `obj` again once `wait` is over (one pending retry per object)."""
        record = self._table.record(key)
        previous, record.pending = record.pending, None
        if previous is not None and previous.task is not asyncio.current_task():
            previous.task.cancel()
        record.pending = Pending(obj.generation, asyncio.create_task(self._retry_after(key, wait)), obj)

    async def _retry_after(self, key: str, wait: Coroutine[Any, Any, None]) -> None:
        await wait
        record = self._table.get(key)
        pending = record.pending if record is not None else None
        if record is not None:
            record.pending = None
        if pending is not None:
            await self.process(key, pending.body)

    def reset_backoff(self, key: str) -> None:
        """Forget the object's attempts: its next failure starts the backoff again (it came to rest:
        provisioned, or stalled for its user)."""
        record = self._table.get(key)
        if record is not None:
            record.attempts = 0

    def forget(self, key: str) -> None:
        """Cancel the object's scheduled retry and forget its attempts."""
        record = self._table.get(key)
        if record is None:
            return
        if record.pending is not None:
            record.pending.task.cancel()
            record.pending = None
        record.attempts = 0

    def drop(self, key: str) -> None:
        """`forget`, and drop the body of a turn waiting for the lock (it finds nothing newer)."""
        self.forget(key)
        record = self._table.get(key)
        if record is not None:
            record.waiting = None

    def depth(self) -> int:
        """Objects being reconciled (their lock is held) or waiting for their turn (coalesced: one
        waiter per object); objects waiting only for a retry's backoff are `retries_pending`."""
        return sum(1 for record in self._table
                   if (record.lock is not None and record.lock.locked()) or record.waiting is not None)

    def retries_pending(self) -> int:
        """Objects waiting for a scheduled retry."""
        return sum(1 for record in self._table if record.pending is not None)

    def close(self) -> None:
        """Cancel every scheduled retry."""
        for key, record in self._table.items():
            if record.pending is not None:
                self.forget(key)
