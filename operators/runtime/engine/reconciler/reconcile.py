"""The reconcile of one kind: plan, run the steps, write status, keep the finalizer.

It receives every watch event of its kind (from its `operators.runtime.kube.watch.Watch`), asks its
ownership (the static ring, or with `--sharding leases` the project claims this replica holds)
whether the object's project is ours, asks the store and `pipeline.plan` whether there is work,
runs the steps, and writes status only when it changed: one PATCH per visible transition.
Temporary errors are retried (`queue.WorkQueue`) with exponential backoff; permanent ones end in
Stalled and wait for a spec change, so bad input never turns into a retry loop.

With several replicas (`operators.runtime.shard`), every write (status, finalizer, Event) is
first checked by the `WriteCheck` given (`guard`), and a project moves with `drain`, `prepare`,
`rebuild` and `resume` (`handover.HandOver`). Objects that refer to others are rechecked when
those change (`dependents`). What is known of each object is its record in the `table.ObjectTable`
the parts share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from operators.runtime.core import pipeline as engine
from operators.runtime.core.clock import utc_now
from operators.runtime.core.kinds import FINALIZER, Kind
from operators.runtime.core.pipeline import Observed, PermanentError, StoredRecord, TemporaryError
from operators.runtime.core.ring import project_of
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.engine.outage import ApiHealth
from operators.runtime.engine.reconciler import dependents
from operators.runtime.engine.reconciler.handover import DRAIN_GRACE, HandOver
from operators.runtime.engine.reconciler.queue import DEFAULT_BACKOFF, Backoff, WorkQueue
from operators.runtime.engine.reconciler.table import ObjectTable, as_int, observed_project, older
from operators.runtime.engine.services import EventSink, Services
from operators.runtime.kube.client import is_outage
from operators.runtime.serving.metrics import Metrics

log = logging.getLogger(__name__.rpartition(".")[0])  # the reconciler's one logger, whichever part writes

DELETING = "Deleting"
"""The phase a failed cleanup shows: the object is on its way out and waits for the user."""


class StatusWriter(Protocol):
    """The writes the reconciler makes: status, and the finalizer of kinds with a cleanup."""

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def add_finalizer(
        self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...], finalizer: str
    ) -> dict[str, Any]: ...

    async def remove_finalizer(
        self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...], finalizer: str
    ) -> dict[str, Any]: ...


class ProjectOwnership(Protocol):
    """Whether this replica acts on a project now (`core.ring.Ownership`, `shard.ShardMember`)."""

    def owns(self, project: str) -> bool: ...


class WriteCheck(Protocol):
    """Asked right before each write for a project (`shard.WriteGuard`): raises when we may not write."""

    def check(self, project: str | None) -> None: ...


class WriteFailed(Exception):
    """A status write that did not go through; retried like any temporary error."""


def _event_type(error: PermanentError | TemporaryError) -> str:
    return "Normal" if isinstance(error, TemporaryError) and error.waiting else "Warning"


_CONDITION_FIELDS = frozenset({"conditions", "phase", "observedGeneration"})


def _only_conditions(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether the status write from `before` to `after` changes nothing but how the object is doing."""
    patch = engine.status_patch(before, after)
    return patch is None or set(patch) <= _CONDITION_FIELDS


def _summary(patch: Mapping[str, Any]) -> str:
    """The fields a status patch changes, with conditions by type and status (never values: a status
    may hold what the user should not find in a log)."""
    parts = []
    for name, value in sorted(patch.items()):
        if name == "conditions" and isinstance(value, list):
            parts.append("conditions[" + ", ".join(f"{c.get('type')}={c.get('status')}/{c.get('reason')}"
                                                   for c in value if isinstance(c, Mapping)) + "]")
        else:
            parts.append(name)
    return ", ".join(parts) or "nothing"


def _caused(error: TemporaryError, cause: BaseException) -> TemporaryError:
    """`error` as raised from `cause` (which `is_outage` reads) without raising it."""
    error.__cause__ = cause
    return error


class Reconciler:
    """One kind's reconciliation: the front of its work queue, dependents and hand-over, which share
    one record per object (`table.ObjectTable`)."""

    def __init__(
        self,
        kind: Kind,
        *,
        store: LocalStore,
        ownership: ProjectOwnership,
        writer: StatusWriter,
        events: EventSink,
        metrics: Metrics,
        clock: Callable[[], str] = utc_now,
        backoff: Backoff = DEFAULT_BACKOFF,
        services: Services | None = None,  # None in pure tests
        health: ApiHealth | None = None,
        guard: WriteCheck | None = None,
    ) -> None:
        self.kind = kind
        self._store = store
        self._ownership = ownership
        self._writer = writer
        self._events = events
        self._metrics = metrics
        self._clock = clock
        self._services = services
        self._health = health
        self._guard = guard
        self.on_ready_change: Callable[[str, str, str], Awaitable[None]] | None = None
        self._table = ObjectTable()
        self._queue = WorkQueue(self._table, kind.kind, self._turn, backoff=backoff, count=self._count)
        self._handover = HandOver(self._table, self._queue, store, kind.kind, self.on_event, count=self._count)
        metrics.track_queue(kind.kind, self.queue_depth, self.retries_pending)

    async def on_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Handle one watch event (`None`: the object as first listed, not a change)."""
        obj = Observed.from_body(body)
        key = object_key(self.kind.kind, obj.namespace, obj.name)
        self._count("stead_events_seen_total")
        if event_type == "DELETED" and self._store.delete(key, uid=obj.uid):
            # before its dependents are told: what they read of it from the store must be gone already
            self._count("stead_store_deleted_total")
        if dependents.moved(self._table, event_type, key, obj) and self.on_ready_change is not None:
            await self.on_ready_change(self.kind.kind, obj.namespace, obj.name)
        if event_type == "DELETED":
            record = self._table.get(key)
            known = record.project if record is not None else None
            project = known if known is not None else project_of(body)
            self._handover.deleted(project, key, obj)
            self._queue.forget(key)
            self._table.went(key)
            return
        project = project_of(body)
        record = self._table.record(key)
        record.project = project
        if not self._ownership.owns(project):
            self._handover.received(project, key, obj)
            self._count("stead_not_owned_total")
            return
        if older(obj.resource_version, record.written):
            self._count("stead_stale_events_total")  # from before our own last write: acting on it would undo it
            return
        record.seen = obj
        if obj.deleting and FINALIZER not in obj.finalizers:
            return  # nothing of ours to do before it goes
        await self._queue.add(key, obj)

    async def recheck_referrers(self, kind: str, namespace: str, name: str) -> None:
        """Run again, from the update phase, every owned object that refers to `kind` `name` (in
        `namespace`; in every namespace when the object is cluster-scoped, `namespace` ""), then tell
        the objects that refer to these: what changed under a referrer may change what it means to
        its own referrers, though its readiness did not move (a Lifecycle edited under a
        ServiceEntity that stays Ready reaches the entity's instances)."""
        rechecked: list[Observed] = []
        for key, obj in dependents.referrers(self._table, self.kind, kind, namespace, name, self._owns):
            self._count("stead_rechecks_total")
            self._queue.forget(key)
            async with self._queue.lock(key):
                started = time.perf_counter()
                try:
                    record = self._table.get(key)
                    seen = record.seen if record is not None else None
                    await self._run(key, seen if seen is not None else obj, self.kind.pipeline.update_phase)
                finally:
                    self._metrics.observe_reconcile(self.kind.kind, time.perf_counter() - started)
            rechecked.append(obj)
        if self.on_ready_change is not None:
            for obj in rechecked:
                await self.on_ready_change(self.kind.kind, obj.namespace, obj.name)

    async def reconcile(self, key: str, obj: Observed) -> None:
        """Reconcile under the object's lock. Events arriving while a reconcile runs coalesce: one
        waiter, which takes the freshest body when its turn comes (never a queue of old ones)."""
        await self._queue.process(key, obj)

    async def _turn(self, key: str, latest: Observed) -> None:
        """The object's turn, under its lock, with the freshest body received."""
        if self._guard is not None and not self._owns(observed_project(latest)):
            self._count("stead_not_owned_total")  # the project left while this waited (a retry, a waiter)
            return
        if not older(latest.resource_version, self._table.written(key)):
            started = time.perf_counter()
            try:
                if self._guard is None:
                    await self._reconcile_locked(key, latest)
                else:  # in a task of its own, which `drain` may cancel without cancelling our caller
                    await self._queue.cancellable(key, self._reconcile_locked(key, latest))
            finally:
                self._metrics.observe_reconcile(self.kind.kind, time.perf_counter() - started)

    def _owns(self, project: str) -> bool:
        return self._ownership.owns(project)

    async def _reconcile_locked(self, key: str, obj: Observed) -> None:
        if self.kind.cleanup is not None:
            try:
                if obj.deleting:
                    await self._clean_up(key, obj)
                    return
                if FINALIZER not in obj.finalizers:  # created past the mutating webhook: add it now
                    await self._finalizer("add", obj)
            except WriteFailed as error:
                self._retry(key, obj, _caused(TemporaryError("FinalizerWriteFailed", str(error)), error))
                return
        decision = engine.plan(self.kind.pipeline, obj, self._store.get(key))
        if isinstance(decision, engine.Skip):
            self._count("stead_reconcile_skipped_total")
            return
        if isinstance(decision, engine.Adopt):
            self._store.put(key, StoredRecord(obj.uid, obj.generation, dict(obj.spec), dict(obj.status)))
            self._count("stead_store_adopted_total")
            return
        try:
            if isinstance(decision, engine.Restore):
                await self._write(obj, dict(decision.status))
                self._count("stead_reconcile_restored_total")
                return
            await self._run(key, obj, decision.start)
        except WriteFailed as error:
            self._retry(key, obj, _caused(TemporaryError("StatusWriteFailed", str(error)), error))

    async def _run(self, key: str, obj: Observed, start: str) -> None:
        self._count("stead_reconcile_runs_total")
        current = obj

        async def announce(phase: str, facts: Mapping[str, Any]) -> None:
            nonlocal current
            status = engine.announce_status(current, phase, facts, self._clock())
            if await self._write(current, status):
                current = replace(current, status=status)
                self._record(current, "Normal", phase, f"entered phase {phase}")

        outcome = await engine.run(self.kind.pipeline, obj, start, on_enter=announce, services=self._services)
        status = engine.compose_status(current, outcome, self._clock())
        if outcome.error is None:
            self._store.put(key, StoredRecord(obj.uid, obj.generation, dict(obj.spec), status))
        else:  # no longer Provisioned (a recheck failed): a restart must not restore a stale Ready
            self._store.delete(key, uid=obj.uid)
        if isinstance(outcome.error, TemporaryError) and is_outage(outcome.error) \
                and _only_conditions(current.status, status):
            # The API server is unreachable or overloaded: nothing about the object changed, and saying
            # so in its conditions would cost two writes (there and back) at the worst moment.
            self._count("stead_outage_writes_saved_total")
            self._retry(key, current, outcome.error)
            return
        changed = await self._write(current, status)
        current = replace(current, status=status)
        error = outcome.error
        if error is None:
            self._queue.reset_backoff(key)
            if changed:
                self._record(current, "Normal", engine.PROVISIONED, f"{self.kind.kind} is provisioned")
        elif isinstance(error, PermanentError):
            self._queue.reset_backoff(key)
            self._count("stead_stalled_total")
            if changed:
                self._record(current, "Warning", error.reason, error.message)
        else:
            if changed:
                self._record(current, _event_type(error), error.reason, error.message)
            self._retry(key, current, error)

    async def _clean_up(self, key: str, obj: Observed) -> None:
        """Run the kind's cleanup, then let the object go; failures keep it, with the reason."""
        assert self.kind.cleanup is not None
        self._count("stead_cleanups_total")
        self._store.delete(key, uid=obj.uid)  # on its way out: nothing may use it as Provisioned any more
        try:
            await self.kind.cleanup(self._context(obj))
        except (PermanentError, TemporaryError) as error:
            failure: PermanentError | TemporaryError = error
        except Exception as error:  # a bug or an outage: retried, like a failing step
            failure = TemporaryError("InternalError", f"{type(error).__name__}: {error}")
        else:
            await self._finalizer("remove", obj)
            self._queue.forget(key)
            return
        outcome = engine.Outcome(phase=DELETING, facts=failure.facts, error=failure)
        status = engine.compose_status(obj, outcome, self._clock())
        if await self._write(obj, status):
            self._record(obj, _event_type(failure), failure.reason, failure.message)
        if isinstance(failure, TemporaryError):
            self._retry(key, replace(obj, status=status), failure)

    def _context(self, obj: Observed) -> engine.StepContext:
        """What a cleanup is given (without services in pure tests, as a step then is)."""
        if self._services is None:
            return engine.StepContext(obj=obj, facts={})
        return engine.StepContext(obj=obj, facts={}, services=self._services)

    def _may_write(self, obj: Observed) -> None:
        """Raise `WriteFailed` unless this replica may write for `obj`'s project now."""
        if self._guard is None:
            return
        try:
            self._guard.check(observed_project(obj))
        except Exception as error:
            self._count("stead_fenced_writes_total")
            raise WriteFailed(f"{obj.namespace}/{obj.name}: {error}") from error

    def _record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        """An Event, unless this replica may not write for the object's project now."""
        try:
            self._may_write(obj)
        except WriteFailed:
            return
        self._events.record(obj, type_, reason, message)

    async def _finalizer(self, action: str, obj: Observed) -> None:
        call = self._writer.add_finalizer if action == "add" else self._writer.remove_finalizer
        self._may_write(obj)
        try:
            answer = await call(self.kind.plural, obj.namespace, obj.name, obj.finalizers, FINALIZER)
        except Exception as error:
            if getattr(error, "status", None) == 404:
                return  # already gone
            raise WriteFailed(f"finalizer of {obj.namespace}/{obj.name} not changed: {error}") from error
        self._remember_write(obj, answer)
        self._count("stead_finalizer_patches_total")

    async def _write(self, obj: Observed, status: dict[str, Any]) -> bool:
        """Patch only what changed; True when a PATCH was sent."""
        patch = engine.status_patch(obj.status, status)
        if patch is None:
            return False
        if log.isEnabledFor(logging.DEBUG):  # what each write changes: the first question of a PATCH count
            log.debug("%s %s/%s: status write of %s", self.kind.kind, obj.namespace, obj.name, _summary(patch))
        self._may_write(obj)
        try:
            answer = await self._writer.patch_status(self.kind.plural, obj.namespace, obj.name, patch)
        except Exception as error:
            if getattr(error, "status", None) == 404:
                return False  # deleted meanwhile: its DELETED event cleans up
            raise WriteFailed(f"status of {obj.namespace}/{obj.name} not written: {error}") from error
        self._remember_write(obj, answer)
        self._count("stead_status_patches_total")
        return True

    def _remember_write(self, obj: Observed, answer: Mapping[str, Any]) -> None:
        version = as_int(str((answer.get("metadata") or {}).get("resourceVersion") or ""))
        if version is not None:
            record = self._table.record(object_key(self.kind.kind, obj.namespace, obj.name))
            record.written = version
            if record.seen is not None:  # a recheck starts from what we wrote, not from the body before it
                record.seen = Observed.from_body(answer)


    def _retry(self, key: str, obj: Observed, error: TemporaryError) -> None:
        self._queue.retry(key, obj, error, self._health)

    def sweep(self, live: Sequence[Mapping[str, Any]]) -> int:
        """Drop store records of objects deleted while the operator was away; returns how many."""
        alive = {
            object_key(self.kind.kind, m.get("namespace", ""), m.get("name", "")): m.get("uid")
            for m in (item.get("metadata") or {} for item in live)
        }
        gone = [k for k, rec in self._store.items(self.kind.kind) if alive.get(k) != rec.uid]
        for key in gone:
            self._store.delete(key)
        return len(gone)

    def queue_depth(self) -> int:
        """Objects being reconciled (their lock is held) or waiting for their turn (coalesced: one
        waiter per object); objects waiting only for a retry's backoff are `retries_pending`."""
        return self._queue.depth()

    def retries_pending(self) -> int:
        """Objects waiting for a scheduled retry."""
        return self._queue.retries_pending()

    def placements(self) -> set[tuple[str, str]]:
        """(namespace, project) of every object of this kind seen, ours or not (`HandOver.placements`)."""
        return self._handover.placements()

    async def drain(self, project: str, grace: float = DRAIN_GRACE) -> None:
        """`project` left us: stop, settle and forget it (`HandOver.drain`)."""
        await self._handover.drain(project, grace)

    def prepare(self, project: str) -> None:
        """`project`'s claim is ours: keep its events from now on (`HandOver.prepare`)."""
        self._handover.prepare(project)

    def rebuild(self, project: str, listed: Sequence[Mapping[str, Any]]) -> None:
        """Drop what is held of `project`, keep its fresh listing for `resume` (`HandOver.rebuild`)."""
        self._handover.rebuild(project, listed)

    def resume(self, project: str) -> None:
        """Act on every object `rebuild` listed, as after a restart (`HandOver.resume`)."""
        self._handover.resume(project)

    async def close(self) -> None:
        self._queue.close()
        self._handover.close()

    def _count(self, name: str) -> None:
        self._metrics.inc(name, kind=self.kind.kind)
