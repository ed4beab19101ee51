"""The HTTP API's reads served from memory: a view of the configuration kinds fed by watches.

`KubeConfigRepository` reads three lists from the API server per request. A Hiera backend asks
once per key, so that is three API-server round trips per lookup; this cache makes a lookup a
dictionary hit and leaves the API server alone. `CachedConfigRepository` keeps every write
path of `KubeConfigRepository` (Kubernetes stays the source of truth) and serves reads from a
`ConfigCache` once it is in sync, from the API server before that or while a watch is broken.

Why watches of its own, and not the operator's LMDB store: the store holds only the objects
this replica owns on the hash ring, and only once Provisioned. The API is served by every
replica (the chart's Service spreads clients over them) and must show a value written a moment
ago, before the operator has versioned it. A watch per kind (Environment, ConfigComponent,
ConfigValues, all namespaces) sees every object whoever wrote it, within milliseconds.

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
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
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
from operators.runtime.kube.client import USER_AGENT, ApiError, ClusterAccess, Requester, custom_path

log = logging.getLogger(__name__)

PLURALS = (ENVIRONMENTS, COMPONENTS, VALUES)
MODELS: dict[str, Any] = {ENVIRONMENTS: EnvironmentSpec, COMPONENTS: ConfigComponentSpec, VALUES: ConfigValuesSpec}
OPEN = "OPEN"  # the pseudo-event a source yields once a watch is established


class Gone(Exception):
    """The resourceVersion a watch asked for is too old (HTTP 410): list again."""


class WatchSource(Protocol):
    """Lists and watches of one kind in all namespaces (`KubeWatchSource`, or a fake in tests)."""

    async def list(self, plural: str) -> tuple[list[dict[str, Any]], str]:
        """Every object, and the list's resourceVersion to watch from."""
        ...

    def watch(self, plural: str, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        """`{"type": "OPEN"}` once connected, then the API server's events; raises `Gone` on 410."""
        ...


class KubeWatchSource:
    """`WatchSource` over the API server, with a session of its own (watches are long requests)."""

    def __init__(self, access: ClusterAccess, timeout_seconds: int = 290) -> None:
        self._access = access
        self._timeout = timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeWatchSource:
        self._session = aiohttp.ClientSession(
            base_url=self._access.server,
            headers={"User-Agent": f"{USER_AGENT}/config-cache", **self._access.headers},
            connector=aiohttp.TCPConnector(ssl=self._access.ssl_context, limit=len(PLURALS) + 2),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self._timeout + 30),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeWatchSource used outside `async with`")
        return self._session

    async def list(self, plural: str) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        params = {"limit": "500"}
        while True:
            async with self._http().get(custom_path(plural), params=params,
                                        timeout=aiohttp.ClientTimeout(total=60)) as response:
                text = await response.text()
                if response.status >= 300:
                    raise ApiError(response.status, _message(text))
            page = json.loads(text)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion") or "")
            params = {"limit": "500", "continue": str(meta["continue"])}

    async def watch(self, plural: str, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(self._timeout)}
        async with self._http().get(custom_path(plural), params=params) as response:
            if response.status == 410:
                raise Gone(plural)
            if response.status >= 300:
                raise ApiError(response.status, _message(await response.text()))
            yield {"type": OPEN}
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                buffer.extend(chunk)
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        if (event.get("object") or {}).get("code") == 410:
                            raise Gone(plural)
                        raise ApiError(int((event.get("object") or {}).get("code") or 500),
                                       str((event.get("object") or {}).get("message") or "watch error"))
                    yield event


def _message(text: str) -> str:
    try:
        return str(json.loads(text).get("message") or text[:200])
    except (ValueError, AttributeError):
        return text[:200]


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

    def __init__(self, source: WatchSource, retry: float = 1.0, max_retry: float = 30.0) -> None:
        self._source = source
        self._retry = retry
        self._max_retry = max_retry
        self._objects: dict[str, dict[str, dict[str, Cached]]] = {plural: {} for plural in PLURALS}
        self._tombstones: dict[tuple[str, str, str], str] = {}  # (plural, namespace, name) -> uid
        self._synced: set[str] = set()
        self._changes: dict[str, int] = {}  # namespace -> changes seen
        self._epoch = 0  # bumped by every full list
        self.events = 0

    # --- reading --------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Listed, and every watch connected: reads may come from here."""
        return len(self._synced) == len(PLURALS)

    def stamp(self, namespace: str) -> tuple[int, int]:
        """Changes when anything of the namespace changes (compare for equality only)."""
        return self._epoch, self._changes.get(namespace, 0)

    def get(self, plural: str, namespace: str, name: str) -> Cached | None:
        return self._objects[plural].get(namespace, {}).get(name)

    def items(self, plural: str, namespace: str) -> list[tuple[str, Cached]]:
        return sorted(self._objects[plural].get(namespace, {}).items())

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
        entry = _parse(plural, body)
        held = self.get(plural, namespace, name)
        if held is not None and held.uid == entry.uid:
            older = held.resource_version
            newer = entry.resource_version
            if older is not None and newer is not None and newer <= older:
                return False  # a late event: the cache holds this version or a later one already
        self._objects[plural].setdefault(namespace, {})[name] = entry
        self._touch(namespace)
        return True

    def replace(self, plural: str, items: list[dict[str, Any]]) -> None:
        """A full list: what it holds is all there is."""
        fresh: dict[str, dict[str, Cached]] = {}
        listed: set[tuple[str, str]] = set()
        for body in items:
            namespace, name = _where(body)
            listed.add((namespace, name))
            uid = str((body.get("metadata") or {}).get("uid") or "")
            if self._tombstones.get((plural, namespace, name)) == uid:
                continue
            fresh.setdefault(namespace, {})[name] = _parse(plural, body)
        self._objects[plural] = fresh
        for key in [k for k in self._tombstones if k[0] == plural and (k[1], k[2]) not in listed]:
            del self._tombstones[key]  # confirmed gone
        self._epoch += 1

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

    # --- following the API server ---------------------------------------------------------

    async def run(self) -> None:
        """Follow all three kinds until cancelled."""
        await asyncio.gather(*(self.follow(plural) for plural in PLURALS))

    async def follow(self, plural: str) -> None:
        """List, then watch from the list's resourceVersion; list again when told it is too old.

        A broken watch takes the kind out of sync (reads go to the API server) until a new
        watch is connected; the watch resumes from the last resourceVersion seen, so no event
        is missed.
        """
        resource_version: str | None = None
        delay = self._retry
        while True:
            try:
                if resource_version is None:
                    items, resource_version = await self._source.list(plural)
                    self.replace(plural, items)
                async for event in self._source.watch(plural, resource_version):
                    kind = str(event.get("type") or "")
                    if kind == OPEN:
                        self._synced.add(plural)
                        delay = self._retry
                        continue
                    body = event.get("object") or {}
                    rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
                    if rv:
                        resource_version = rv
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.events += 1
                        self.apply(kind, plural, body)
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("config cache: %s watch expired; listing again", plural)
                resource_version = None
            except Exception as error:  # an outage or a refusal: read through until it works again
                self._synced.discard(plural)
                log.warning("config cache: %s: %s (retry in %.0fs)", plural,
                            getattr(error, "message", None) or type(error).__name__, delay)
                await asyncio.sleep(delay)  # backoff before reconnecting
                delay = min(self._max_retry, delay * 2)


class CachedConfigRepository(KubeConfigRepository):
    """`ConfigRepository` whose reads come from a `ConfigCache` (when in sync) and whose writes go
    to the API server and, from its answer, into the cache."""

    def __init__(self, kube: Requester, cache: ConfigCache) -> None:
        super().__init__(kube)
        self.cache = cache
        self._snapshots: dict[tuple[str, str], tuple[tuple[int, int], Snapshot | None]] = {}
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
async def cached_repository(kube: Requester, access: ClusterAccess) -> AsyncIterator[ConfigRepository]:
    """A `CachedConfigRepository` following the API server at `access`, for as long as the context lasts."""
    async with KubeWatchSource(access) as source:
        cache = ConfigCache(source)
        task = asyncio.create_task(cache.run())
        try:
            yield CachedConfigRepository(kube, cache)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
