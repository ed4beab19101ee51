"""The HTTP API's reads served from memory: a view of the configuration kinds fed by watches.

`KubeConfigRepository` reads three lists from the API server per request. A Hiera backend asks
once per key, so that is three API-server round trips per lookup; this cache makes a lookup a
dictionary hit and leaves the API server alone. `CachedConfigRepository` keeps every write
path of `KubeConfigRepository` (Kubernetes stays the source of truth) and serves reads from a
`ConfigCache` once it is in sync, from the API server before that or while a watch is broken.

Why watches, and not the operator's LMDB store: the store holds only the objects this replica
owns on the hash ring, and only once Provisioned. The API is served by every replica (the
chart's Service spreads clients over them) and must show a value written a moment ago, before
the operator has versioned it. A watch per kind (Environment, ConfigComponent, ConfigValues, all
namespaces: `operators.runtime.kube.watch.Watch`) sees every object whoever wrote it, within
milliseconds. In the operator's own process, when its watches of these kinds see every object
(one replica, no `--namespace`), the cache follows those (a tap: one watch and one decoding of
each event for the reconcilers and the cache); elsewhere (sharded replicas, whose watches see
their buckets only; worker processes) it runs watches of its own.

Consistency:
- A write through this API is put into the cache from the API server's answer before the
  response goes out, so a client reads its own writes from any replica it wrote through
  (and from every other one once the watch event arrives).
- A write by kubectl or GitOps shows after the watch delivers it (milliseconds).
- An event older than what the cache holds (by resourceVersion, when both are numbers) is
  ignored, so a late watch event cannot undo a write-through. A deletion through the API
  leaves a tombstone until the watch confirms it.
- A snapshot of one environment is built once and then returned as the same object until
  something in its namespace changes, so the HTTP layer's per-snapshot cache of effective
  values holds between changes. Versions put in force by `spec.revertTo` are immutable
  ConfigMaps, read once and kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from operators.config.history import Owner, Version
from operators.config.models import ConfigComponentSpec, ConfigValuesSpec
from operators.config.repository import (
    COMPONENTS,
    ENVIRONMENTS,
    VALUES,
    ConfigRepository,
    Invalid,
    KubeConfigRepository,
    Snapshot,
    StoredValues,
    ValuesTarget,
)
from operators.environment.models import EnvironmentSpec
from operators.runtime import USER_AGENT, ClusterAccess, KubeClient, Requester, Watch, custom_path

log = logging.getLogger(__name__)

PLURALS = (ENVIRONMENTS, COMPONENTS, VALUES)
MODELS: dict[str, Any] = {ENVIRONMENTS: EnvironmentSpec, COMPONENTS: ConfigComponentSpec, VALUES: ConfigValuesSpec}
def _number(resource_version: Any) -> int | None:
    text = str(resource_version or "")
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Cached:
    """One object as the cache keeps it: the body, and its spec parsed (or why it does not parse)."""

    body: Mapping[str, Any]
    spec: Any  # the kind's spec model, or None when invalid
    error: str = ""

    @property
    def uid(self) -> str:
        return str((self.body.get("metadata") or {}).get("uid") or "")

    @property
    def resource_version(self) -> int | None:
        return _number((self.body.get("metadata") or {}).get("resourceVersion"))


def _parse(plural: str, body: Mapping[str, Any]) -> Cached:
    try:
        return Cached(body, MODELS[plural].model_validate(body.get("spec") or {}))
    except ValidationError as error:
        return Cached(body, None, str(error.errors()[0]["msg"]) if error.errors() else str(error))


def _where(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ConfigCache:
    """Environments, ConfigComponents and ConfigValues of every namespace, kept current by watches."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, dict[str, Cached]]] = {plural: {} for plural in PLURALS}
        self._tombstones: dict[tuple[str, str, str], str] = {}  # (plural, namespace, name) -> uid
        self._watches: dict[str, Watch] = {}
        self._changes: dict[str, int] = {}  # namespace -> changes seen
        self.events = 0

    def follow(self, watches: Mapping[str, Watch]) -> None:
        """Follow these watches (by plural, every one of `PLURALS`), which must not have started: the
        cache is told of each event before anything else is done with it."""
        missing = set(PLURALS) - set(watches)
        if missing:
            raise ValueError(f"the config cache needs watches of {', '.join(sorted(missing))}")
        for plural in PLURALS:
            self._watches[plural] = watches[plural]
            watches[plural].add_tap(self._tap(plural))

    def _tap(self, plural: str) -> Callable[[str | None, Mapping[str, Any]], None]:
        def tap(event_type: str | None, body: Mapping[str, Any]) -> None:
            self.events += 1
            self.apply(event_type or "ADDED", plural, body)

        return tap

    # --- reading --------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Every watch listed and following: reads may come from here."""
        return len(self._watches) == len(PLURALS) and all(w.in_sync for w in self._watches.values())

    def stamp(self, namespace: str) -> int:
        """Changes when anything of the namespace changes (compare for equality only)."""
        return self._changes.get(namespace, 0)

    def get(self, plural: str, namespace: str, name: str) -> Cached | None:
        return self._objects[plural].get(namespace, {}).get(name)

    def items(self, plural: str, namespace: str) -> list[tuple[str, Cached]]:
        return sorted(self._objects[plural].get(namespace, {}).items())

    def everywhere(self, plural: str) -> list[tuple[str, str, Cached]]:
        """(namespace, name, object) of every object of the kind held, in every namespace."""
        return [(namespace, name, cached) for namespace, objects in sorted(self._objects[plural].items())
                for name, cached in sorted(objects.items())]

    # --- writing --------------------------------------------------------------------------

    def observe(self, plural: str, body: Mapping[str, Any]) -> None:
        """An object as the API server returned it to a write of ours (write-through)."""
        self.apply("MODIFIED", plural, body)

    def forget(self, plural: str, namespace: str, name: str, uid: str) -> None:
        """An object we deleted: gone now, and not brought back by an event older than the deletion."""
        self._tombstones[(plural, namespace, name)] = uid
        self._remove(plural, namespace, name)

    def apply(self, event_type: str, plural: str, body: Mapping[str, Any]) -> bool:
        """One watch event; True when the cache changed."""
        namespace, name = _where(body)
        uid = str((body.get("metadata") or {}).get("uid") or "")
        tomb = self._tombstones.get((plural, namespace, name))
        if tomb is not None:
            if uid != tomb or event_type == "DELETED":
                del self._tombstones[(plural, namespace, name)]
            if uid == tomb:
                return False
        if event_type == "DELETED":
            return self._remove(plural, namespace, name)
        held = self.get(plural, namespace, name)
        if held is not None and held.uid == uid:
            older = held.resource_version
            newer = _number((body.get("metadata") or {}).get("resourceVersion"))
            if older is not None and newer is not None and newer <= older:
                return False  # a late event: the cache holds this version or a later one already
        if held is not None and held.uid == uid and held.body.get("spec") == body.get("spec"):
            # the same spec (a status write, a label): its parse stands. Every object the operator
            # provisions comes back once so, after its status PATCH; parsing it again cost 5% of the
            # operator's CPU per Environment (bench/pipeline_throughput.py --py-spy, issue 32). Compared,
            # not told by metadata.generation: a mapping's equality is a fraction of a parse, and holds
            # for any source of bodies
            entry = Cached(body, held.spec, held.error)
        else:
            entry = _parse(plural, body)
        self._objects[plural].setdefault(namespace, {})[name] = entry
        self._touch(namespace)
        return True

    def _remove(self, plural: str, namespace: str, name: str) -> bool:
        bucket = self._objects[plural].get(namespace)
        if bucket is None or bucket.pop(name, None) is None:
            return False
        if not bucket:
            del self._objects[plural][namespace]
        self._touch(namespace)
        return True

    def _touch(self, namespace: str) -> None:
        self._changes[namespace] = self._changes.get(namespace, 0) + 1

class CachedConfigRepository(KubeConfigRepository):
    """`ConfigRepository` whose reads come from a `ConfigCache` (when in sync) and whose writes go
    to the API server and, from its answer, into the cache."""

    def __init__(self, kube: Requester, cache: ConfigCache) -> None:
        super().__init__(kube)
        self.cache = cache
        self._snapshots: dict[tuple[str, str], tuple[int, Snapshot | None]] = {}
        self._versions: dict[tuple[str, int], Version] = {}

    async def list_components(self, namespace: str) -> dict[str, ConfigComponentSpec]:
        if not self.cache.ready:
            return await super().list_components(namespace)
        return {name: c.spec for name, c in self.cache.items(COMPONENTS, namespace) if c.spec is not None}

    async def list_environments(self, namespace: str) -> dict[str, EnvironmentSpec]:
        if not self.cache.ready:
            return await super().list_environments(namespace)
        return {name: c.spec for name, c in self.cache.items(ENVIRONMENTS, namespace) if c.spec is not None}

    async def _create(self, plural: str, kind: str, namespace: str, name: str, spec: Mapping[str, Any]
                      ) -> dict[str, Any]:
        created = await super()._create(plural, kind, namespace, name, spec)
        if created.get("metadata"):
            self.cache.observe(plural, created)
        return created

    async def snapshot(self, namespace: str, environment: str, fresh: bool = False) -> Snapshot | None:
        if fresh or not self.cache.ready:
            return await super().snapshot(namespace, environment)
        stamp = self.cache.stamp(namespace)
        held = self._snapshots.get((namespace, environment))
        if held is not None and held[0] == stamp:
            return held[1]
        snapshot = await self._build(namespace, environment)
        if len(self._snapshots) > 10_000:
            self._snapshots.clear()
        self._snapshots[(namespace, environment)] = (stamp, snapshot)
        return snapshot

    async def _build(self, namespace: str, environment: str) -> Snapshot | None:
        cached = self.cache.get(ENVIRONMENTS, namespace, environment)
        if cached is None:
            return None
        if cached.spec is None:
            raise Invalid(f'Environment "{environment}" has an invalid spec: {cached.error}')
        env: EnvironmentSpec = cached.spec
        components = {name: c.spec for name, c in self.cache.items(COMPONENTS, namespace) if c.spec is not None}
        stored: list[StoredValues] = []
        for _, item in self.cache.items(VALUES, namespace):
            if item.spec is None or item.spec.environment != environment:
                continue
            parsed = await self._stored(namespace, item.body, env, environment)
            if parsed is not None:
                stored.append(parsed)
        return Snapshot(name=environment, environment=env, components=components, values=stored)

    async def _read_version(self, owner: Owner, number: int) -> Version | None:
        """Versions are immutable ConfigMaps: each is read once."""
        key = (owner.uid, number)
        version = self._versions.get(key)
        if version is None:
            version = await super()._read_version(owner, number)
            if version is not None:
                if len(self._versions) > 10_000:
                    self._versions.clear()
                self._versions[key] = version
        return version

    async def write_values(self, namespace: str, target: ValuesTarget, data: dict[str, Any], expect: str | None
                           ) -> StoredValues:
        stored = await super().write_values(namespace, target, data, expect)
        if stored.raw.get("metadata"):
            self.cache.observe(VALUES, stored.raw)
        return stored

    async def delete_values(self, namespace: str, stored: StoredValues, expect: str | None) -> None:
        await super().delete_values(namespace, stored, expect)
        self.cache.forget(VALUES, namespace, stored.name, stored.uid)


@contextlib.asynccontextmanager
async def cached_repository(kube: Requester, access: ClusterAccess, watches: Mapping[str, Watch] | None = None
                            ) -> AsyncIterator[ConfigRepository]:
    """A `CachedConfigRepository` for as long as the context lasts, following `watches` (the
    operator's, not started yet) or, without them, watches of its own of the API server at `access`."""
    cache = ConfigCache()
    if watches is not None:
        cache.follow(watches)
        yield CachedConfigRepository(kube, cache)
        return
    async with KubeClient(access, concurrency=0, user_agent=f"{USER_AGENT}/config-cache") as client:
        own = {plural: Watch(client, custom_path(plural), plural, None) for plural in PLURALS}
        cache.follow(own)
        tasks = [asyncio.create_task(watch.run()) for watch in own.values()]
        try:
            yield CachedConfigRepository(kube, cache)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
