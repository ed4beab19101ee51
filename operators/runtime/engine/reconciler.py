"""Drives the objects of one kind through their pipeline: the bridge between events and the engine.

It receives every watch event of its kind (from its `operators.runtime.kube.watch.Watch`), asks its
ownership (the static ring, or with `--sharding leases` the project claims this replica holds)
whether the object's project is ours, asks the store and `pipeline.plan` whether there is work,
runs the steps, and writes status only when it changed: one PATCH per visible transition.
Temporary errors are retried here with exponential backoff; permanent ones end in Stalled and
wait for a spec change, so bad input never turns into a retry loop.

With several replicas (`operators.runtime.shard`), every write (status, finalizer, Event) is
first checked by the `WriteCheck` given (`guard`), and a project moves with `drain` (the old
owner: stop, settle, forget) and `rebuild` + `resume` (the new owner: drop what the store holds
of the project, take the listing, act on it once the claim is ours).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from operators.runtime.core import conditions as cond
from operators.runtime.core import pipeline as engine
from operators.runtime.core.clock import utc_now
from operators.runtime.core.kinds import FINALIZER, Kind, named_after
from operators.runtime.core.pipeline import Observed, PermanentError, StoredRecord, TemporaryError
from operators.runtime.core.ring import project_key, project_of
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.engine.outage import ApiHealth
from operators.runtime.engine.services import EventSink
from operators.runtime.kube.client import is_outage
from operators.runtime.serving.metrics import Metrics

log = logging.getLogger(__name__)

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


DRAIN_GRACE = 1.0
"""How long a leaving project's reconciles may run on before they are cancelled (a run's runner
goes on by itself: its finished steps are on disk, and the new owner follows it from there)."""


def _project(obj: Observed) -> str:
    return project_key(obj.labels, obj.namespace)


class WriteFailed(Exception):
    """A status write that did not go through; retried like any temporary error."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: `base`, doubling per attempt, capped."""

    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.base * 2 ** max(0, attempt - 1)))


_UNSEEN = -1


def _event_type(error: PermanentError | TemporaryError) -> str:
    return "Normal" if isinstance(error, TemporaryError) and error.waiting else "Warning"


def _as_int(version: str) -> int | None:
    try:
        return int(version)
    except ValueError:
        return None


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


def _older(version: str, written: int | None) -> bool:
    """Whether a body predates our last write. resourceVersions are opaque to clients in general;
    etcd-backed servers issue increasing integers, and anything else is never called older."""
    current = _as_int(version)
    return written is not None and current is not None and current < written


Settled = tuple[str, int] | None


def _settled(obj: Observed) -> Settled:
    """Where an object came to rest: (Ready or Stalled, the generation), or None while it is on its way
    (what its dependents wait for: an App that reached its goal, or failed and waits for its user)."""
    conditions = obj.status.get("conditions") or []
    for verdict in (cond.READY, cond.STALLED):
        if cond.is_true(conditions, verdict):
            return verdict, int(obj.status.get("observedGeneration") or 0)
    return None


def _caused(error: TemporaryError, cause: BaseException) -> TemporaryError:
    """`error` as raised from `cause` (which `is_outage` reads) without raising it."""
    error.__cause__ = cause
    return error


@dataclass
class _Pending:
    generation: int
    task: asyncio.Task[None]


class Reconciler:
    """One kind's reconciliation loop state: pending retries, attempts, per-object locks."""

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
        backoff: Backoff = Backoff(),
        services: Any = None,  # operators.runtime.engine.services.Services (None in pure tests)
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
        self._backoff = backoff
        self._services = services
        self._health = health
        self._guard = guard
        self._projects: dict[str, str] = {}  # every object seen (ours or not) -> its project
        self._running: dict[str, asyncio.Task[None]] = {}  # reconciles in flight (with a guard: cancellable)
        self._listed: dict[str, list[Observed]] = {}  # projects being acquired: their objects, for `resume`
        self._gone: dict[str, set[str]] = {}  # ... and their objects deleted meanwhile
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[str, _Pending] = {}
        self._latest: dict[str, Observed] = {}
        self._seen: dict[str, Observed] = {}  # owned objects, as last observed (for rechecks)
        self._written: dict[str, int] = {}  # the resourceVersion of our last write to each object
        self._newest: dict[str, Observed] = {}  # the freshest body for a reconcile waiting on the lock
        self._settled: dict[str, Settled] = {}  # where every object came to rest (for dependents)
        self.on_ready_change: Callable[[str, str, str], Awaitable[None]] | None = None
        self._attempts: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        metrics.track_queue(kind.kind, self.queue_depth, self.retries_pending)

    async def on_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Handle one watch event (`None`: the object as first listed, not a change)."""
        obj = Observed.from_body(body)
        key = object_key(self.kind.kind, obj.namespace, obj.name)
        self._count("stead_events_seen_total")
        if event_type == "DELETED" and self._store.delete(key, uid=obj.uid):
            # before its dependents are told: what they read of it from the store must be gone already
            self._count("stead_store_deleted_total")
        await self._track_readiness(event_type, key, obj)
        if event_type == "DELETED":
            project = self._projects.pop(key, project_of(body))
            listed = self._listed.get(project)
            if listed is not None:
                listed[:] = [o for o in listed if (o.namespace, o.name) != (obj.namespace, obj.name)]
                self._gone.setdefault(project, set()).add(key)
            self._forget(key)
            self._locks.pop(key, None)
            self._seen.pop(key, None)
            self._written.pop(key, None)
            return
        project = project_of(body)
        self._projects[key] = project
        if not self._ownership.owns(project):
            listed = self._listed.get(project)
            if listed is not None:  # being acquired: what `resume` acts on must not be older than this
                listed[:] = [o for o in listed if (o.namespace, o.name) != (obj.namespace, obj.name)] + [obj]
                self._gone.get(project, set()).discard(key)
            self._count("stead_not_owned_total")
            return
        if _older(obj.resource_version, self._written.get(key)):
            self._count("stead_stale_events_total")  # from before our own last write: acting on it would undo it
            return
        self._seen[key] = obj
        if obj.deleting and FINALIZER not in obj.finalizers:
            return  # nothing of ours to do before it goes
        pending = self._pending.get(key)
        if pending is not None:
            if pending.generation == obj.generation:
                self._latest[key] = obj  # the scheduled retry will use the freshest body
                return
            self._forget(key)  # a new spec: start again now, not at the old retry's time
        await self.reconcile(key, obj)

    async def _track_readiness(self, event_type: str | None, key: str, obj: Observed) -> None:
        """Tell dependents when an object comes to rest in a new way (Ready or Stalled at a new
        generation), stops being Ready, or goes (whatever it was doing).

        Every object this replica receives is tracked, owned or not (with several replicas it
        receives the objects of its buckets: those of its projects, and of projects on their way
        to or from it). A listing (`None`) only records: a restart must not re-check everything
        that refers to something. Leaving Stalled (a retry) or going between two states
        of unrest tells nobody: nothing has come of it yet.
        """
        settled = _settled(obj) if event_type != "DELETED" else None
        before = self._settled.get(key, _UNSEEN)
        if event_type == "DELETED":
            self._settled.pop(key, None)
        else:
            self._settled[key] = settled
        if event_type is None or self.on_ready_change is None:
            return
        if event_type != "DELETED":
            was_ready = isinstance(before, tuple) and before[0] == cond.READY
            if before == settled or (settled is None and not was_ready):
                return
        await self.on_ready_change(self.kind.kind, obj.namespace, obj.name)

    async def recheck_referrers(self, kind: str, namespace: str, name: str) -> None:
        """Run again, from the update phase, every owned object that refers to `kind` `name` (in
        `namespace`; in every namespace when the object is cluster-scoped, `namespace` ""), then tell
        the objects that refer to these: what changed under a referrer may change what it means to
        its own referrers, though its readiness did not move (a Lifecycle edited under a
        ServiceEntity that stays Ready reaches the entity's instances)."""
        refers = self.kind.depends_on.get(kind)
        if refers is None:
            return
        rechecked: list[Observed] = []
        for key, obj in list(self._seen.items()):
            matches = obj.name == name if refers is named_after else refers(obj.spec, name)
            if namespace in ("", obj.namespace) and not obj.deleting and matches \
                    and self._ownership.owns(_project(obj)):
                self._count("stead_rechecks_total")
                self._forget(key)
                async with self._locks.setdefault(key, asyncio.Lock()):
                    started = time.perf_counter()
                    try:
                        await self._run(key, self._seen.get(key, obj), self.kind.pipeline.update_phase)
                    finally:
                        self._metrics.observe_reconcile(self.kind.kind, time.perf_counter() - started)
                rechecked.append(obj)
        if self.on_ready_change is not None:
            for obj in rechecked:
                await self.on_ready_change(self.kind.kind, obj.namespace, obj.name)

    async def reconcile(self, key: str, obj: Observed) -> None:
        """Reconcile under the object's lock. Events arriving while a reconcile runs coalesce: one
        waiter, which takes the freshest body when its turn comes (never a queue of old ones)."""
        waiting = key in self._newest
        self._newest[key] = obj
        if waiting:
            return
        async with self._locks.setdefault(key, asyncio.Lock()):
            latest = self._newest.pop(key, obj)
            if self._guard is not None and not self._ownership.owns(_project(latest)):
                self._count("stead_not_owned_total")  # the project left while this waited (a retry, a waiter)
                return
            if not _older(latest.resource_version, self._written.get(key)):
                started = time.perf_counter()
                try:
                    if self._guard is None:
                        await self._reconcile_locked(key, latest)
                    else:  # in a task of its own, which `drain` may cancel without cancelling our caller
                        await self._cancellable(key, self._reconcile_locked(key, latest))
                finally:
                    self._metrics.observe_reconcile(self.kind.kind, time.perf_counter() - started)

    async def _cancellable(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._running[key] = task
        try:
            await asyncio.wait([task])
        finally:
            if self._running.get(key) is task:
                del self._running[key]
        if not task.cancelled():
            task.result()  # re-raise what it raised

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
            self._attempts.pop(key, None)
            if changed:
                self._record(current, "Normal", engine.PROVISIONED, f"{self.kind.kind} is provisioned")
        elif isinstance(error, PermanentError):
            self._attempts.pop(key, None)
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
            await self.kind.cleanup(engine.StepContext(obj=obj, facts={}, services=self._services))
        except (PermanentError, TemporaryError) as error:
            failure: PermanentError | TemporaryError = error
        except Exception as error:  # a bug or an outage: retried, like a failing step
            failure = TemporaryError("InternalError", f"{type(error).__name__}: {error}")
        else:
            await self._finalizer("remove", obj)
            self._forget(key)
            return
        outcome = engine.Outcome(phase=DELETING, facts=failure.facts, error=failure)
        status = engine.compose_status(obj, outcome, self._clock())
        if await self._write(obj, status):
            self._record(obj, _event_type(failure), failure.reason, failure.message)
        if isinstance(failure, TemporaryError):
            self._retry(key, replace(obj, status=status), failure)

    def _may_write(self, obj: Observed) -> None:
        """Raise `WriteFailed` unless this replica may write for `obj`'s project now."""
        if self._guard is None:
            return
        try:
            self._guard.check(_project(obj))
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
        version = _as_int(str((answer.get("metadata") or {}).get("resourceVersion") or ""))
        if version is not None:
            key = object_key(self.kind.kind, obj.namespace, obj.name)
            self._written[key] = version
            if key in self._seen:  # a recheck starts from what we wrote, not from the body before it
                self._seen[key] = Observed.from_body(answer)

    def _retry(self, key: str, obj: Observed, error: TemporaryError) -> None:
        seen = self._seen.get(key)
        if seen is None or seen.uid != obj.uid:
            # Deleted (its DELETED event came while this reconcile ran, or its namespace went):
            # nothing is left to retry, and a timer for it would run until the operator stops.
            self._count("stead_retries_dropped_total")
            return
        if self._health is not None and is_outage(error):  # not the object's fault: no backoff for it
            self._health.report(error)
            log.debug("%s %s: %s (waiting for the API server)", self.kind.kind, key, error.message)
            self._count("stead_outage_waits_total")
            self._schedule(key, obj, self._health.wait_up())
            return
        attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
        delay = error.delay if error.delay is not None else self._backoff.delay(attempt)
        if error.waiting:  # expected (a run in progress): not a failure, so not logged as a retry
            log.debug("%s %s: waiting: %s (checking again in %.1fs)", self.kind.kind, key, error.message, delay)
            self._count("stead_waits_total")
        else:
            log.info("%s %s: %s (retry %d in %.1fs)", self.kind.kind, key, error.message, attempt, delay)
            self._count("stead_retries_total")
        self._schedule(key, obj, asyncio.sleep(delay))  # the backoff itself, not a synchronisation

    def _schedule(self, key: str, obj: Observed, wait: Coroutine[Any, Any, None]) -> None:
        """Reconcile `obj` again once `wait` is over (one pending retry per object)."""
        previous = self._pending.pop(key, None)
        if previous is not None and previous.task is not asyncio.current_task():
            previous.task.cancel()
        self._latest[key] = obj
        self._pending[key] = _Pending(obj.generation, asyncio.create_task(self._retry_after(key, wait)))

    async def _retry_after(self, key: str, wait: Coroutine[Any, Any, None]) -> None:
        await wait
        self._pending.pop(key, None)
        obj = self._latest.pop(key, None)
        if obj is not None:
            await self.reconcile(key, obj)

    def _forget(self, key: str) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None:
            pending.task.cancel()
        self._latest.pop(key, None)
        self._attempts.pop(key, None)

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
        return len({key for key, lock in self._locks.items() if lock.locked()} | self._newest.keys())

    def retries_pending(self) -> int:
        """Objects waiting for a scheduled retry."""
        return len(self._pending)

    def placements(self) -> set[tuple[str, str]]:
        """(namespace, project) of every object of this kind seen, ours or not: the projects that
        exist, what claims are taken for."""
        return {(key.split("/", 2)[1], project) for key, project in self._projects.items()}

    def _keys_of(self, project: str) -> list[str]:
        keys = {k for k, p in self._projects.items() if p == project}
        # records of an earlier process of ours, for objects not seen since (by namespace)
        keys.update(k for k, _ in self._store.items(self.kind.kind) if k.split("/", 2)[1] == project)
        return sorted(keys)

    async def drain(self, project: str, grace: float = DRAIN_GRACE) -> None:
        """`project` left us (`owns` is already False for it): cancel its pending retries, give its
        reconciles in flight `grace` seconds to finish, cancel those still running (a safe point:
        what a step finished is written, a run's runner goes on by itself), forget its objects'
        local state and drop its store records, so that nothing of ours is acted on or reused."""
        keys = self._keys_of(project)
        self._listed.pop(project, None)
        self._gone.pop(project, None)
        for key in keys:
            self._forget(key)
            self._newest.pop(key, None)
        running = [t for k in keys if (t := self._running.get(k)) is not None and not t.done()]
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                self._count("stead_drain_cancelled_total")
                await asyncio.wait(late, timeout=grace)
        for key in keys:
            self._seen.pop(key, None)
            self._written.pop(key, None)
            self._attempts.pop(key, None)
            self._store.delete(key)
        self._count("stead_projects_drained_total")

    def prepare(self, project: str) -> None:
        """`project`'s claim is ours, its listing about to be read: from now on its events (which
        we do not act on yet) are kept, so that what changes while the listing is read is not lost."""
        self._listed[project] = []
        self._gone[project] = set()

    def rebuild(self, project: str, listed: Sequence[Mapping[str, Any]]) -> None:
        """`project` is being acquired (at a new epoch): drop everything held locally of it (a
        project that went A -> B -> A comes back changed: nothing of before is reused) and keep the
        fresh listing, merged with the events kept since `prepare` (the newer body of each object
        wins; one deleted meanwhile is left out), for `resume`."""
        for key in self._keys_of(project):
            self._forget(key)
            self._seen.pop(key, None)
            self._written.pop(key, None)
            self._store.delete(key)
        gone = self._gone.pop(project, set())
        merged: dict[str, Observed] = {}
        for obj in [Observed.from_body(body) for body in listed]:
            key = object_key(self.kind.kind, obj.namespace, obj.name)
            if key not in gone:
                merged[key] = obj
        for obj in self._listed.get(project, []):
            key = object_key(self.kind.kind, obj.namespace, obj.name)
            listed_obj = merged.get(key)
            if listed_obj is None or not _older(obj.resource_version, _as_int(listed_obj.resource_version)):
                merged[key] = obj
        self._listed[project] = list(merged.values())
        for key in merged:
            self._projects[key] = project

    def resume(self, project: str) -> None:
        """The claim is ours: act on every object `rebuild` listed, as after a restart (adopt what
        is Provisioned from its status, follow a run in flight from its finished steps, start the
        rest), each in a task of its own."""
        for obj in self._listed.pop(project, []):
            body = {"kind": obj.kind or self.kind.kind, "metadata": {
                "namespace": obj.namespace, "name": obj.name, "uid": obj.uid, "generation": obj.generation,
                "labels": dict(obj.labels), "finalizers": list(obj.finalizers),
                "resourceVersion": obj.resource_version,
                **({"deletionTimestamp": "listed"} if obj.deleting else {})},
                "spec": dict(obj.spec), "status": dict(obj.status)}
            task = asyncio.create_task(self.on_event(None, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._count("stead_projects_resumed_total")

    async def close(self) -> None:
        for key in list(self._pending):
            self._forget(key)
        for task in list(self._tasks):
            task.cancel()

    def _count(self, name: str) -> None:
        self._metrics.inc(name, kind=self.kind.kind)
