"""The shard hand-over of one reconciler: a project moves from one replica to another.

With several replicas (`operators.runtime.shard`) a project moves with `drain` (the old owner:
stop, settle, forget) and `prepare` + `rebuild` + `resume` (the new owner: keep the project's
events from the moment its claim is ours, drop what the store holds of it, take the listing, act on
it once the claim is ours). What is held of each object is in its `table.Tracked` record; what is
held of a project being acquired is its `Acquiring` record here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.runtime.core.pipeline import Observed
from operators.runtime.core.store import LocalStore, key_namespace, object_key
from operators.runtime.engine.reconciler.queue import WorkQueue
from operators.runtime.engine.reconciler.table import ObjectTable, as_int, older

DRAIN_GRACE = 1.0
"""How long a leaving project's reconciles may run on before they are cancelled (a run's runner
goes on by itself: its finished steps are on disk, and the new owner follows it from there)."""

Deliver = Callable[[str | None, Mapping[str, Any]], Coroutine[Any, Any, None]]
"""The reconciler's handling of one event (`None`: the object as first listed)."""


@dataclass
class Acquiring:
    """A project being acquired: its objects, for `resume` (from `prepare`, the events received;
    from `rebuild`, the listing merged with them), and those deleted meanwhile."""

    listed: list[Observed] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)

    def keep(self, key: str, obj: Observed) -> None:
        """A newer body of an object of the project."""
        self.listed[:] = [o for o in self.listed if (o.namespace, o.name) != (obj.namespace, obj.name)] + [obj]
        self.gone.discard(key)

    def drop(self, key: str, obj: Observed) -> None:
        """An object of the project was deleted."""
        self.listed[:] = [o for o in self.listed if (o.namespace, o.name) != (obj.namespace, obj.name)]
        self.gone.add(key)


class HandOver:
    """The projects of one kind (`kind`: its name) moving to or from this replica."""

    def __init__(self, table: ObjectTable, queue: WorkQueue, store: LocalStore, kind: str, deliver: Deliver, *,
                 count: Callable[[str], None]) -> None:
        self._table = table
        self._queue = queue
        self._store = store
        self._kind = kind
        self._deliver = deliver
        self._count = count
        self._acquiring: dict[str, Acquiring] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # `resume`'s

    def received(self, project: str, key: str, obj: Observed) -> None:
        """An object of a project not ours (now): when the project is being acquired, what `resume`
        acts on must not be older than this."""
        acquiring = self._acquiring.get(project)
        if acquiring is not None:
            acquiring.keep(key, obj)

    def deleted(self, project: str, key: str, obj: Observed) -> None:
        """An object was deleted: when its project is being acquired, `resume` must not act on it."""
        acquiring = self._acquiring.get(project)
        if acquiring is not None:
            acquiring.drop(key, obj)

    def placements(self) -> set[tuple[str, str]]:
        """(namespace, project) of every object of this kind seen, ours or not: the projects that
        exist, what claims are taken for."""
        return {(key_namespace(key), record.project) for key, record in self._table.items()
                if record.project is not None}

    def _keys_of(self, project: str) -> list[str]:
        keys = self._table.keys_of(project)
        # records of an earlier process of ours, for objects not seen since (by namespace)
        keys.update(k for k, _ in self._store.items(self._kind) if key_namespace(k) == project)
        return sorted(keys)

    async def drain(self, project: str, grace: float = DRAIN_GRACE) -> None:
        """`project` left us (`owns` is already False for it): cancel its pending retries, give its
        reconciles in flight `grace` seconds to finish, cancel those still running (a safe point:
        what a step finished is written, a run's runner goes on by itself), forget its objects'
        local state and drop its store records, so that nothing of ours is acted on or reused."""
        keys = self._keys_of(project)
        self._acquiring.pop(project, None)
        for key in keys:
            self._queue.drop(key)
        await self._queue.cancel(keys, grace)
        for key in keys:
            self._drop(key)
            self._queue.reset_backoff(key)
        self._count("stead_projects_drained_total")

    def _drop(self, key: str) -> None:
        """Drop what is held of an object of a project that moves: what we saw and wrote of it, its
        store record."""
        record = self._table.get(key)
        if record is not None:
            record.seen = None
            record.written = None
        self._store.delete(key)

    def prepare(self, project: str) -> None:
        """`project`'s claim is ours, its listing about to be read: from now on its events (which
        we do not act on yet) are kept, so that what changes while the listing is read is not lost."""
        self._acquiring[project] = Acquiring()

    def rebuild(self, project: str, listed: Sequence[Mapping[str, Any]]) -> None:
        """`project` is being acquired (at a new epoch): drop everything held locally of it (a
        project that went A -> B -> A comes back changed: nothing of before is reused) and keep the
        fresh listing, merged with the events kept since `prepare` (the newer body of each object
        wins; one deleted meanwhile is left out), for `resume`."""
        for key in self._keys_of(project):
            self._queue.forget(key)
            self._drop(key)
        kept = self._acquiring.get(project) or Acquiring()
        merged: dict[str, Observed] = {}
        for obj in [Observed.from_body(body) for body in listed]:
            key = object_key(self._kind, obj.namespace, obj.name)
            if key not in kept.gone:
                merged[key] = obj
        for obj in kept.listed:
            key = object_key(self._kind, obj.namespace, obj.name)
            listed_obj = merged.get(key)
            if listed_obj is None or not older(obj.resource_version, as_int(listed_obj.resource_version)):
                merged[key] = obj
        self._acquiring[project] = Acquiring(list(merged.values()))
        for key in merged:
            self._table.record(key).project = project

    def resume(self, project: str) -> None:
        """The claim is ours: act on every object `rebuild` listed, as after a restart (adopt what
        is Provisioned from its status, follow a run in flight from its finished steps, start the
        rest), each in a task of its own."""
        acquiring = self._acquiring.pop(project, None)
        for obj in acquiring.listed if acquiring is not None else []:
            body = {"kind": obj.kind or self._kind, "metadata": {
                "namespace": obj.namespace, "name": obj.name, "uid": obj.uid, "generation": obj.generation,
                "labels": dict(obj.labels), "finalizers": list(obj.finalizers),
                "resourceVersion": obj.resource_version,
                **({"deletionTimestamp": "listed"} if obj.deleting else {})},
                "spec": dict(obj.spec), "status": dict(obj.status)}
            task = asyncio.create_task(self._deliver(None, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._count("stead_projects_resumed_total")

    def close(self) -> None:
        """Cancel what `resume` started and is still running."""
        for task in list(self._tasks):
            task.cancel()
