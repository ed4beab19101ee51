"""List, then watch: the objects of one kind in one scope, filtered by the API server.

Stead feeds its reconcilers from these watches rather than from Kopf's (Kopf keeps the
admission webhooks and the operator's lifecycle). Two reasons, measured (bench/README.md):
- Kopf's watches send no label selector: every replica would receive and decode every event of
  every kind, whatever it owns. Here a `Selection` is a label selector the API server applies
  (`stead.dev/shard-bucket in (...)`, operators.runtime.shard), so a replica receives only the
  events of the projects it owns.
- Kopf's per-event machinery (its body views, per-object queues with batching windows, its
  progress storage, its posting) cost about a third of the operator's CPU per object even behind
  one low-level `on.event` handler.

What it guarantees, as client-go's reflector does:
- The first listing is delivered with event type None (as Kopf's initial listing: "what is
  there", not "what changed"), every later change as ADDED / MODIFIED / DELETED.
- A watch that ends (the API server's `timeoutSeconds`, a dropped connection: a few in a row)
  resumes from the last resourceVersion seen (bookmarks keep it fresh); one refused as too old
  (410 Gone), or failing again and again, lists again and delivers only the difference: MODIFIED
  for what changed meanwhile, ADDED for what appeared, DELETED for what went (the last body known
  of it: its metadata).
- Events of one object are delivered in order, one at a time; objects do not wait for each other.
  Changes that pile up behind a slow delivery coalesce (only the newest body of a run of
  MODIFIED events is delivered: what a reconciler wants is the object's present state).
- `select` changes the selection: the watch lists again with the new selector; objects that left
  the selection are forgotten without an event (another replica's business now, not deleted),
  objects that entered it are delivered as None (first seen, like a listing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from operators.runtime.kube.client import ApiError, ApiUnreachable, KubeClient, is_outage, list_all

log = logging.getLogger(__name__)

Deliver = Callable[[str | None, Mapping[str, Any]], Awaitable[None]]
"""Called with (event type or None for a listing, the object's body)."""

Tap = Callable[[str | None, Mapping[str, Any]], None]
"""Told of every event as it arrives, synchronously, before it is queued for `Deliver` (a cache in
memory that follows the same objects: one watch, one decoding, for both)."""

LabelTest = Callable[[Mapping[str, str]], bool]

RESUMES = 3
"""Dropped connections in a row a watch resumes from where it was before it lists again."""


@dataclass(frozen=True)
class Selection:
    """What a watch asks for: a label selector for the API server, and the same test locally
    (to tell an object that left the selection from one that was deleted). `paused`: nothing
    at all (a replica that owns no bucket yet does not watch)."""

    selector: str | None
    matches: LabelTest
    paused: bool = False


EVERYTHING = Selection(None, lambda _labels: True)
NOTHING = Selection(None, lambda _labels: False, paused=True)


class WatchMetrics(Protocol):
    def inc(self, name: str, amount: float = ..., **labels: str) -> None: ...


@dataclass(frozen=True)
class WatchSettings:
    """How long a watch request lasts, how listings are paged, how failures back off."""

    timeout_seconds: int = 290
    """Asked of the API server per WATCH request (it ends it then; we resume from where we were)."""
    page_size: int = 500
    retry_base: float = 0.5
    retry_cap: float = 30.0


@dataclass(frozen=True)
class _Known:
    """What is kept of each object seen: enough to resume and to announce its deletion."""

    version: str
    labels: Mapping[str, str]
    uid: str


class _Gone(Exception):
    """The resourceVersion we resume from is too old (410): list again."""


class Watch:
    """One kind in one scope (a namespace, or every namespace) fed to `deliver`."""

    def __init__(self, kube: KubeClient, path: str, kind: str, deliver: Deliver | None, *,
                 selection: Selection = EVERYTHING, metrics: WatchMetrics | None = None,
                 settings: WatchSettings = WatchSettings()) -> None:
        self.path = path
        self.kind = kind
        self.listed = asyncio.Event()
        """Set once the first listing of the current selection has been delivered (readiness)."""
        self._kube = kube
        self._deliver = deliver
        self._selection = selection
        self._metrics = metrics
        self._settings = settings
        self._changed = asyncio.Event()
        self._known: dict[str, _Known] = {}
        self._queues: dict[str, deque[tuple[str | None, Mapping[str, Any]]]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._taps: list[Tap] = []
        self._failing = False

    @property
    def selection(self) -> Selection:
        return self._selection

    @property
    def in_sync(self) -> bool:
        """Listed and following: what was delivered is what the API server holds, but for the
        milliseconds an event takes (False after a failure until a listing succeeds again)."""
        return self.listed.is_set() and not self._failing and not self._selection.paused

    def add_tap(self, tap: Tap) -> None:
        """Tell `tap` of every event from now on (add taps before `run`: a tap sees the first listing
        only if it is there when the listing is read)."""
        self._taps.append(tap)

    @property
    def taps(self) -> tuple[Tap, ...]:
        """The taps added: a cache that follows the watch is found through it (`isinstance`)."""
        return tuple(self._taps)

    def select(self, selection: Selection) -> None:
        """Watch `selection` from now on (listed again; see the module's docstring)."""
        if selection.selector == self._selection.selector and selection.paused == self._selection.paused:
            return
        self._selection = selection
        self.listed.clear()
        self._changed.set()

    def known(self) -> int:
        """How many objects this watch holds (in the current selection)."""
        return len(self._known)

    def covers(self, labels: Mapping[str, str]) -> bool:
        """Whether every object with these labels is known here: the current selection takes them
        and has been listed (from then on each one's events are queued here as they arrive)."""
        return self.listed.is_set() and not self._selection.paused and self._selection.matches(labels)

    def namespaces_where(self, test: Callable[[str, Mapping[str, str]], bool]) -> set[str]:
        """The namespaces of the objects known here whose (namespace, labels) pass `test`."""
        found: set[str] = set()
        for key, known in self._known.items():
            namespace = key.partition("/")[0]
            if namespace not in found and test(namespace, known.labels):
                found.add(namespace)
        return found

    async def run(self) -> None:
        """List and watch until cancelled; failures are retried with backoff, never raised."""
        previous: Selection = NOTHING  # what the objects known were selected by (first: nothing known)
        failures = 0
        try:
            while True:
                selection = self._selection
                self._changed.clear()
                if selection.paused:
                    self._forget_outside(selection)
                    previous = selection
                    self.listed.set()
                    await self._changed.wait()
                    continue
                try:
                    version = await self._list(selection, previous)
                    previous = selection
                    if self._selection is selection:  # else a new one came while listing: listed next
                        self.listed.set()
                    failures = 0
                    self._failing = False
                    await self._until_changed(self._follow(version))
                except _Gone:
                    self._count("stead_watch_relists_total", reason="expired")
                except ApiError as error:
                    failures += 1
                    self._failing = True
                    self._count("stead_watch_relists_total", reason="outage" if is_outage(error) else "error")
                    delay = min(self._settings.retry_cap, self._settings.retry_base * 2 ** min(failures, 16))
                    log.info("watch of %s (%s): %s (listing again in %.1fs)", self.kind, self.path, error, delay)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), delay)  # the backoff, or a new selection
        finally:
            for task in list(self._workers):
                task.cancel()

    async def _until_changed(self, follow: Awaitable[None]) -> None:
        """Run `follow` until it ends (it raises to list again) or the selection changes."""
        following = asyncio.ensure_future(follow)
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({following, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (following, changed):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await changed
        if following.done() and not following.cancelled():
            following.result()  # raises what ended it
        else:
            self._count("stead_watch_relists_total", reason="selection")
            with contextlib.suppress(asyncio.CancelledError):
                await following

    async def _list(self, selection: Selection, previous: Selection) -> str:
        """List `selection`; deliver what is new or changed against what we know (all of it as
        None the first time); returns the listing's resourceVersion to watch from."""
        items, version = await list_all(self._kube, self.path,
                                        {"labelSelector": selection.selector} if selection.selector else None,
                                        self._settings.page_size)
        listed = {_key(item): item for item in items}
        self._count("stead_watch_lists_total")
        for key in [k for k in self._known if k not in listed]:
            known = self._known.pop(key)
            if previous.matches(known.labels) and selection.matches(known.labels):
                self._dispatch(key, "DELETED", self._tombstone(key, known))  # went while we did not watch
        for key, item in listed.items():
            seen = self._known.get(key)
            event_type: str | None
            if seen is None:
                # Created while we did not watch (ADDED), or first seen: a first listing, or an object
                # that entered the selection (None: what is there, not what changed).
                meta = item.get("metadata") or {}
                event_type = "ADDED" if previous.matches(meta.get("labels") or {}) else None
            elif seen.version != str((item.get("metadata") or {}).get("resourceVersion") or ""):
                event_type = "MODIFIED"
            else:
                continue
            self._remember(key, item)
            self._dispatch(key, event_type, {**item, "kind": item.get("kind") or self.kind})
        return version

    async def _follow(self, version: str) -> None:
        """Watch from `version` for as long as the API server keeps answering. A dropped connection
        (or a line cut short) resumes from the last version seen, after a short backoff, up to
        `RESUMES` times in a row; then, or on any other failure, it raises (`ApiError`: list again
        after backoff; `_Gone`: the version is too old, list again now)."""
        drops = 0
        while True:
            params = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": version,
                      "timeoutSeconds": str(self._settings.timeout_seconds)}
            if self._selection.selector:
                params["labelSelector"] = self._selection.selector
            try:  # closed at once when we stop reading (a 410, a new selection), not when collected
                async with contextlib.aclosing(
                        self._kube.lines(self.path, params, self._settings.timeout_seconds + 30)) as lines:
                    async for line in lines:
                        version = self._handle(line, version)
                        drops = 0
            except ApiUnreachable:
                drops += 1
                if drops > RESUMES:
                    raise
                self._count("stead_watch_resumes_total")
                await asyncio.sleep(min(self._settings.retry_cap, self._settings.retry_base * 2 ** drops))
            except ApiError as error:
                if error.status == 410:  # answered as a status rather than as an ERROR event
                    raise _Gone() from None
                raise

    def _handle(self, line: bytes, version: str) -> str:
        """Dispatch one watch line; returns the resourceVersion to resume from after it."""
        try:
            event = json.loads(line)
        except ValueError:  # a line cut short (a stream cut mid-event): as a dropped connection
            raise ApiUnreachable(f"WATCH {self.path}: a cut or garbled line: {line[:80]!r}") from None
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise _Gone()
            raise ApiError(code, str(obj.get("message") or "watch error"))
        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if event_type == "BOOKMARK":
            return version
        key = _key(obj)
        self._count("stead_watch_events_total")
        if event_type == "DELETED":
            self._known.pop(key, None)
        else:
            self._remember(key, obj)
        self._dispatch(key, str(event_type), obj)
        return version

    def _remember(self, key: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self._known[key] = _Known(str(meta.get("resourceVersion") or ""), dict(meta.get("labels") or {}),
                                  str(meta.get("uid") or ""))

    def _tombstone(self, key: str, known: _Known) -> dict[str, Any]:
        namespace, _, name = key.rpartition("/")
        return {"kind": self.kind, "metadata": {
            "namespace": namespace, "name": name, "uid": known.uid, "labels": dict(known.labels),
            "resourceVersion": known.version}}

    def _forget_outside(self, selection: Selection) -> None:
        for key in [k for k, known in self._known.items() if not selection.matches(known.labels)]:
            del self._known[key]

    def _dispatch(self, key: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Tell the taps; queue the event behind the object's earlier ones, starting its worker if it
        has none."""
        for tap in self._taps:
            try:
                tap(event_type, body)
            except Exception:  # a tap's bug must not stop the watch nor the reconciler behind it
                log.exception("%s %s: a tap failed on a %s event", self.kind, key, event_type or "listing")
        if self._deliver is None:
            return
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            task = asyncio.create_task(self._work(key, queue))
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)
        elif event_type == "MODIFIED" and len(queue) > 1 and queue[-1][0] in ("ADDED", "MODIFIED"):
            # queue[0] is being delivered; the last one is not yet: only the newest body matters
            queue[-1] = (queue[-1][0], body)
            self._count("stead_watch_coalesced_total")
            return
        queue.append((event_type, body))

    async def _work(self, key: str, queue: deque[tuple[str | None, Mapping[str, Any]]]) -> None:
        assert self._deliver is not None
        try:
            while queue:
                event_type, body = queue[0]
                try:
                    await self._deliver(event_type, body)
                except Exception:  # a handler's bug must not stop the object's later events, nor the watch
                    log.exception("%s %s: handling a %s event failed", self.kind, key, event_type or "listing")
                finally:
                    queue.popleft()
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    def _count(self, name: str, **labels: str) -> None:
        if self._metrics is not None:
            self._metrics.inc(name, 1.0, kind=self.kind, **labels)


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
