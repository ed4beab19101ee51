"""Stead's list+watch (operators.runtime.kube.watch) against a real HTTP server on loopback.

A small fake API server (aiohttp) serves paginated LISTs with label selectors and chunked WATCH
streams the test scripts line by line; a real `KubeClient` talks to it. Nothing of `Watch` is
replaced: what is checked is what the API server was asked and what `deliver` received.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
import socket
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from operators.runtime.kube.client import ClusterAccess, KubeClient
from operators.runtime.kube.watch import EVERYTHING, NOTHING, Watch, WatchSettings
from operators.runtime.shard.labelling import UNLABELLED
from operators.runtime.shard.ring import BUCKET_LABEL
from operators.runtime.shard.wiring import selecting

PATH = "/apis/stead.dev/v1alpha1/things"
KIND = "Thing"
END = b""  # queued on a stream: end it (the API server's timeoutSeconds)
FAST = WatchSettings(timeout_seconds=60, retry_base=0.01, retry_cap=0.05)


def _selected(selector: str | None, labels: Mapping[str, str]) -> bool:
    """The two selector forms Stead sends: `key in (v1,v2)` and `!key`."""
    if not selector:
        return True
    if selector.startswith("!"):
        return selector[1:] not in labels
    match = re.fullmatch(r"(\S+) in \(([^)]*)\)", selector)
    if match is None:
        raise ValueError(selector)
    return labels.get(match[1]) in match[2].split(",")


class FakeApi:
    """One kind's collection: GET lists it (`limit`/`continue`, `labelSelector`); GET ?watch=1
    streams what the test queues on `streams[-1]` (JSON lines, raw bytes, END)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.lists: list[dict[str, str]] = []
        self.watches: list[dict[str, str]] = []
        self.streams: list[asyncio.Queue[bytes]] = []
        self.list_failures = 0
        self.closed = False
        self.refused: list[str] = []
        self.hold: asyncio.Event | None = None
        self.app = web.Application()
        self.app.router.add_get(PATH, self.handle)

    # the store
    def put(self, name: str, labels: Mapping[str, str] | None = None, namespace: str = "ns",
            **spec: Any) -> dict[str, Any]:
        self.version += 1
        old = self.objects.get(f"{namespace}/{name}")
        uid = old["metadata"]["uid"] if old else f"uid-{name}-{self.version}"
        body = {"apiVersion": "stead.dev/v1alpha1", "kind": KIND,
                "metadata": {"namespace": namespace, "name": name, "uid": uid,
                             "resourceVersion": str(self.version), "labels": dict(labels or {})},
                "spec": spec}
        self.objects[f"{namespace}/{name}"] = body
        return body

    def remove(self, name: str, namespace: str = "ns") -> dict[str, Any]:
        self.version += 1
        body = self.objects.pop(f"{namespace}/{name}")
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}

    # the current watch stream
    def send(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self.streams[-1].put_nowait(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

    def bookmark(self, version: int) -> None:
        self.version = max(self.version, version)
        self.send("BOOKMARK", {"kind": KIND, "apiVersion": "stead.dev/v1alpha1",
                               "metadata": {"resourceVersion": str(version)}})

    def gone(self) -> None:
        self.send("ERROR", {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                            "code": 410, "message": "too old resource version"})

    def end(self) -> None:
        self.streams[-1].put_nowait(END)

    def close(self) -> None:
        self.closed = True
        for stream in self.streams:
            stream.put_nowait(END)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        selector = query.get("labelSelector")
        try:
            _selected(selector, {})
        except ValueError:
            self.refused.append(str(selector))
            return web.json_response({"kind": "Status", "code": 400, "message": "bad selector"}, status=400)
        if query.get("watch") == "1":
            return await self.stream(request, query)
        self.lists.append(query)
        hold = self.hold  # the hold in place when the request came: answered once it is set
        if hold is not None:
            await hold.wait()
        if self.list_failures:
            self.list_failures -= 1
            return web.json_response({"kind": "Status", "code": 500, "message": "etcdserver: request timed out"},
                                     status=500)
        selected = [body for _, body in sorted(self.objects.items())
                    if _selected(selector, body["metadata"]["labels"])]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(selected)
        meta: dict[str, str] = {"resourceVersion": str(self.version)}
        if start + limit < len(selected):
            meta["continue"] = str(start + limit)
        items = [{k: v for k, v in body.items() if k not in ("kind", "apiVersion")}  # as a real LIST
                 for body in selected[start:start + limit]]
        return web.json_response({"kind": f"{KIND}List", "apiVersion": "stead.dev/v1alpha1",
                                  "metadata": meta, "items": items})

    async def stream(self, request: web.Request, query: dict[str, str]) -> web.StreamResponse:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.watches.append(query)
        self.streams.append(queue)
        if self.closed:
            queue.put_nowait(END)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        while (data := await queue.get()) != END:
            await response.write(data)
        return response


class Seen:
    """A `deliver` that records (event type, namespace/name, resourceVersion) and the bodies."""

    def __init__(self) -> None:
        self.events: list[tuple[str | None, str, str]] = []
        self.bodies: list[Mapping[str, Any]] = []

    async def __call__(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        self.record(event_type, body)

    def record(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        self.events.append((event_type, f"{meta['namespace']}/{meta['name']}", meta["resourceVersion"]))
        self.bodies.append(body)

    def of(self, key: str) -> list[tuple[str | None, str]]:
        return [(t, rv) for t, k, rv in self.events if k == key]


class Counts:
    """A WatchMetrics: counts by (name, reason)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str | None]] = Counter()

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self.counts[(name, labels.get("reason"))] += int(amount)


async def until(predicate: Callable[[], Any], what: str, seconds: float = 5.0) -> Any:
    """Poll `predicate` (the event loop keeps running) until it is truthy, or fail after `seconds`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not (value := predicate()):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {seconds:g}s waiting for {what}")
        await asyncio.sleep(0.005)
    return value


async def listed(watch: Watch) -> None:
    await asyncio.wait_for(watch.listed.wait(), 5)


@contextlib.asynccontextmanager
async def running(watch: Watch) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(watch.run())
    try:
        yield task
    finally:
        if task.done():
            task.result()  # `run` must never end by itself: raise what ended it
            raise AssertionError("Watch.run returned")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def client(url: str) -> KubeClient:
    return KubeClient(ClusterAccess(url.rstrip("/"), ssl.create_default_context()), timeout=2.0)


def scenario(test: Callable[[FakeApi, KubeClient], Awaitable[None]]) -> None:
    async def main() -> None:
        api = FakeApi()
        async with TestServer(api.app, host="127.0.0.1") as server:
            try:
                async with client(str(server.make_url(""))) as kube:
                    await test(api, kube)
            finally:
                api.close()
        assert api.refused == []

    asyncio.run(asyncio.wait_for(main(), 8))


def test_the_first_listing_is_delivered_as_none_over_pages_then_changes_in_order() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        api.put("b", n=1)
        api.put("c", namespace="other", n=1)
        seen = Seen()
        watch = Watch(kube, PATH, KIND, seen, settings=WatchSettings(page_size=2))
        async with running(watch):
            await listed(watch)
            assert [(q["limit"], q.get("continue"), q.get("labelSelector")) for q in api.lists] == [
                ("2", None, None), ("2", "2", None)]  # two pages, no selector for EVERYTHING
            await until(lambda: len(seen.events) == 3, "the listing")
            assert sorted(seen.events, key=str) == [(None, "ns/a", "1"), (None, "ns/b", "2"), (None, "other/c", "3")]
            assert all(body["kind"] == KIND for body in seen.bodies)  # LIST items carry no kind: filled in
            assert watch.known() == 3

            await until(lambda: api.watches, "the watch request")
            assert api.watches[0]["resourceVersion"] == "3" and api.watches[0]["allowWatchBookmarks"] == "true"
            assert api.watches[0]["timeoutSeconds"] == "290" and "labelSelector" not in api.watches[0]
            d = api.put("d", n=1)
            api.send("ADDED", d)
            api.send("MODIFIED", api.put("d", n=2))
            api.send("MODIFIED", api.put("a", n=2))
            gone = api.remove("d")
            api.send("DELETED", gone)
            api.send("DELETED", api.remove("b"))
            await until(lambda: len(seen.events) == 8, "the watch's events")
            assert seen.of("ns/d") == [("ADDED", "4"), ("MODIFIED", "5"), ("DELETED", "7")]
            assert seen.of("ns/a") == [(None, "1"), ("MODIFIED", "6")]
            assert seen.of("ns/b") == [(None, "2"), ("DELETED", "8")]
            assert seen.bodies[seen.events.index(("DELETED", "ns/d", "7"))] == gone
            assert watch.known() == 2
            assert len(api.lists) == 2 and len(api.watches) == 1

    scenario(test)


def test_an_ended_stream_resumes_from_the_last_version_and_bookmarks_advance_it() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        seen = Seen()
        watch = Watch(kube, PATH, KIND, seen, settings=FAST)
        async with running(watch):
            await until(lambda: api.watches, "the first watch")
            assert api.watches[0]["resourceVersion"] == "1" and api.watches[0]["timeoutSeconds"] == "60"
            api.send("MODIFIED", api.put("a", n=2))
            api.end()
            await until(lambda: len(api.watches) == 2, "the watch resumed")
            assert api.watches[1]["resourceVersion"] == "2"  # the last event's

            api.bookmark(10)
            api.end()
            await until(lambda: len(api.watches) == 3, "the watch resumed again")
            assert api.watches[2]["resourceVersion"] == "10"  # the bookmark's
            assert len(api.lists) == 1  # resumed, never listed again
            assert seen.events == [(None, "ns/a", "1"), ("MODIFIED", "ns/a", "2")]  # a bookmark is not delivered

    scenario(test)


def test_a_watch_too_old_lists_again_and_delivers_only_the_difference() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        api.put("b", n=1)
        api.put("c", {"team": "x"}, n=1)
        seen = Seen()
        counts = Counts()
        watch = Watch(kube, PATH, KIND, seen, metrics=counts, settings=FAST)
        async with running(watch):
            await until(lambda: api.watches, "the first watch")
            await until(lambda: len(seen.events) == 3, "the listing")
            api.put("a", n=2)  # changed, created, deleted while the watch was away: no event
            api.put("d", n=1)
            api.remove("c")
            api.gone()
            await until(lambda: len(api.watches) == 2, "the watch after listing again")
            assert len(api.lists) == 2 and api.watches[1]["resourceVersion"] == "6"
            await until(lambda: len(seen.events) == 6, "the difference")
            assert sorted(seen.events[3:], key=str) == [
                ("ADDED", "ns/d", "5"), ("DELETED", "ns/c", "3"), ("MODIFIED", "ns/a", "4")]
            tombstone = seen.bodies[seen.events.index(("DELETED", "ns/c", "3"))]
            assert tombstone["kind"] == KIND
            assert {k: tombstone["metadata"][k] for k in ("namespace", "name", "uid", "labels")} == {
                "namespace": "ns", "name": "c", "uid": "uid-c-3", "labels": {"team": "x"}}
            assert seen.of("ns/b") == [(None, "2")]  # unchanged: not delivered again
            assert watch.known() == 3
            assert counts.counts[("stead_watch_relists_total", "expired")] == 1

    scenario(test)


def test_a_new_selection_is_listed_with_its_selector_and_objects_that_left_it_are_forgotten_silently() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", {BUCKET_LABEL: "1"}, n=1)
        api.put("b", {BUCKET_LABEL: "2"}, n=1)
        api.put("c", {BUCKET_LABEL: "3"}, n=1)
        api.put("u", n=1)
        seen = Seen()
        watch = Watch(kube, PATH, KIND, seen, selection=selecting(frozenset({1, 2})), settings=FAST)
        async with running(watch):
            await listed(watch)
            await until(lambda: api.watches, "the first watch")
            assert api.lists[0]["labelSelector"] == api.watches[0]["labelSelector"] == f"{BUCKET_LABEL} in (1,2)"
            await until(lambda: len(seen.events) == 2, "the listing")
            assert sorted(seen.events) == [(None, "ns/a", "1"), (None, "ns/b", "2")]

            api.put("b", {BUCKET_LABEL: "2"}, n=2)  # while the selection changes: no watch event of these
            api.put("e", {BUCKET_LABEL: "2"}, n=1)
            watch.select(selecting(frozenset({2, 3})))
            assert not watch.listed.is_set()
            await listed(watch)
            await until(lambda: len(api.watches) == 2, "the watch of the new selection")
            assert api.lists[1]["labelSelector"] == api.watches[1]["labelSelector"] == f"{BUCKET_LABEL} in (2,3)"
            await until(lambda: len(seen.events) == 5, "what the new selection brought")
            assert sorted(seen.events[2:], key=str) == [
                ("ADDED", "ns/e", "6"), ("MODIFIED", "ns/b", "5"), (None, "ns/c", "3")]  # c entered: as listed
            assert seen.of("ns/a") == [(None, "1")]  # left the selection: no DELETED
            assert watch.known() == 3

            watch.select(UNLABELLED)
            await listed(watch)
            await until(lambda: len(api.watches) == 3, "the watch of the unlabelled")
            assert api.lists[2]["labelSelector"] == api.watches[2]["labelSelector"] == f"!{BUCKET_LABEL}"
            await until(lambda: len(seen.events) == 6, "the unlabelled object")
            assert seen.events[5] == (None, "ns/u", "4")
            assert watch.known() == 1
            api.send("MODIFIED", api.put("u", n=2))  # the new watch is followed
            await until(lambda: len(seen.events) == 7, "a change of the unlabelled object")
            assert seen.events[6] == ("MODIFIED", "ns/u", "7")

    scenario(test)


def test_one_objects_events_are_delivered_in_order_one_at_a_time_without_blocking_others() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        api.put("b", n=1)
        seen = Seen()
        gate = asyncio.Event()
        active: Counter[str] = Counter()
        overlapping: list[str] = []

        async def deliver(event_type: str | None, body: Mapping[str, Any]) -> None:
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            active[key] += 1
            if active[key] > 1:
                overlapping.append(key)
            try:
                seen.record(event_type, body)
                if key == "ns/a" and event_type == "MODIFIED" and body["spec"]["n"] == 2:
                    await gate.wait()
            finally:
                active[key] -= 1

        watch = Watch(kube, PATH, KIND, deliver, settings=FAST)
        async with running(watch):
            await until(lambda: api.watches, "the watch")
            await until(lambda: len(seen.events) == 2, "the listing")
            api.send("MODIFIED", api.put("a", n=2))  # rv 3: blocks in deliver
            await until(lambda: ("MODIFIED", "3") in seen.of("ns/a"), "a's delivery to block")
            for n in (3, 4, 5):  # rv 4, 5, 6: pile up behind it
                api.send("MODIFIED", api.put("a", n=n))
            api.send("MODIFIED", api.put("b", n=2))  # rv 7, 8: another object's, after those on the stream
            api.send("DELETED", api.remove("b"))
            await until(lambda: seen.of("ns/b") == [(None, "2"), ("MODIFIED", "7"), ("DELETED", "8")],
                        "b's events while a is blocked")
            assert seen.of("ns/a") == [(None, "1"), ("MODIFIED", "3")]  # nothing of a's passed the blocked one
            gate.set()
            await until(lambda: len(seen.of("ns/a")) == 3, "a's events after the block")
            api.send("MODIFIED", api.put("a", n=9))  # a marker: nothing else of a's is still to come
            await until(lambda: len(seen.of("ns/a")) == 4, "the marker")
            assert seen.of("ns/a") == [(None, "1"), ("MODIFIED", "3"), ("MODIFIED", "6"), ("MODIFIED", "9")]
            assert seen.bodies[seen.events.index(("MODIFIED", "ns/a", "6"))]["spec"] == {"n": 5}  # the newest body
            assert overlapping == []

    scenario(test)


def test_a_failing_delivery_stops_neither_the_objects_later_events_nor_the_watch(
        caplog: pytest.LogCaptureFixture) -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        seen = Seen()

        async def deliver(event_type: str | None, body: Mapping[str, Any]) -> None:
            seen.record(event_type, body)
            if body["spec"]["n"] in (1, 2):
                raise RuntimeError(f"handler bug {body['spec']['n']}")

        watch = Watch(kube, PATH, KIND, deliver, settings=FAST)
        async with running(watch):
            await until(lambda: api.watches, "the watch")
            api.send("MODIFIED", api.put("a", n=2))
            api.send("MODIFIED", api.put("a", n=3))
            api.send("ADDED", api.put("b", n=5))
            await until(lambda: ("MODIFIED", "ns/a", "3") in seen.events and ("ADDED", "ns/b", "4") in seen.events,
                        "the events after the failures")
            api.end()
            await until(lambda: len(api.watches) == 2, "the watch resumed")
            assert api.watches[1]["resourceVersion"] == "4" and len(api.lists) == 1
            api.send("DELETED", api.remove("a"))
            await until(lambda: ("DELETED", "ns/a", "5") in seen.events, "the watch going on")
            assert seen.of("ns/a") == [(None, "1"), ("MODIFIED", "2"), ("MODIFIED", "3"), ("DELETED", "5")]

    with caplog.at_level(logging.ERROR, logger="operators.runtime.kube.watch"):
        scenario(test)
    assert "ns/a: handling a listing event failed" in caplog.text
    assert "ns/a: handling a MODIFIED event failed" in caplog.text and "handler bug 2" in caplog.text


def test_a_failing_listing_is_retried() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        api.list_failures = 2
        seen = Seen()
        counts = Counts()
        watch = Watch(kube, PATH, KIND, seen, metrics=counts, settings=FAST)
        async with running(watch):
            await listed(watch)
            assert len(api.lists) == 3
            assert counts.counts[("stead_watch_relists_total", "error")] == 2
            await until(lambda: seen.events == [(None, "ns/a", "1")], "the listing")

    scenario(test)


def test_an_unreachable_api_server_is_retried_until_it_answers() -> None:
    async def main() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]  # free once closed: connections refused until the server starts
        api = FakeApi()
        api.put("a", n=1)
        seen = Seen()
        counts = Counts()
        async with client(f"http://127.0.0.1:{port}") as kube:
            watch = Watch(kube, PATH, KIND, seen, metrics=counts, settings=FAST)
            async with running(watch):
                await until(lambda: counts.counts[("stead_watch_relists_total", "outage")] >= 2, "failed listings")
                assert not watch.listed.is_set()
                async with TestServer(api.app, host="127.0.0.1", port=port):
                    try:
                        await listed(watch)
                        await until(lambda: seen.events == [(None, "ns/a", "1")], "the listing")
                        await until(lambda: api.watches, "the watch")
                        assert api.watches[0]["resourceVersion"] == "1"
                    finally:
                        api.close()

    asyncio.run(asyncio.wait_for(main(), 8))


def test_nothing_requests_nothing_and_is_listed_at_once() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        seen = Seen()
        watch = Watch(kube, PATH, KIND, seen, selection=NOTHING, settings=FAST)
        async with running(watch):
            await listed(watch)
            watch.select(EVERYTHING)  # the first request the server sees is this selection's listing
            await listed(watch)
            await until(lambda: api.watches, "the watch")
            assert len(api.lists) == 1 and "labelSelector" not in api.lists[0]
            await until(lambda: seen.events == [(None, "ns/a", "1")], "the listing")

            watch.select(NOTHING)  # paused again: the watch is dropped, what was known forgotten
            await listed(watch)
            assert watch.known() == 0
            watch.select(EVERYTHING)
            await listed(watch)
            await until(lambda: len(api.watches) == 2, "the watch again")
            assert len(api.lists) == 2
            await until(lambda: len(seen.events) == 2, "the listing again")
            assert seen.events[1] == (None, "ns/a", "1")  # first seen again: as listed

    scenario(test)


def test_a_watch_line_over_128_kib_is_delivered_whole() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        seen = Seen()
        watch = Watch(kube, PATH, KIND, seen, settings=FAST)
        async with running(watch):
            await until(lambda: api.watches, "the watch")
            big = api.put("big", blob="x" * 300_000)
            small = api.put("small", n=1)
            data = b"".join(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n" for obj in (big, small))
            cuts = [0, 1000, 150_000, len(data) - len(json.dumps(small)) - 30, len(data)]  # cut inside both lines
            for start, stop in itertools.pairwise(cuts):
                api.streams[-1].put_nowait(data[start:stop])
            await until(lambda: len(seen.events) == 2, "both objects")
            assert seen.bodies[seen.events.index(("ADDED", "ns/big", "1"))] == big
            assert seen.bodies[seen.events.index(("ADDED", "ns/small", "2"))] == small

    scenario(test)


def test_a_stream_cut_mid_line_resumes_from_the_last_event_instead_of_ending_the_watch() -> None:
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", n=1)
        seen = Seen()
        counts = Counts()
        watch = Watch(kube, PATH, KIND, seen, metrics=counts, settings=FAST)
        async with running(watch):
            await until(lambda: api.watches, "the watch")
            event = json.dumps({"type": "MODIFIED", "object": api.put("a", n=2)}).encode() + b"\n"
            api.streams[-1].put_nowait(event + event[:40])  # the stream ends inside the next line
            api.end()
            await until(lambda: len(api.watches) == 2, "the watch resumed")
            assert len(api.lists) == 1 and api.watches[1]["resourceVersion"] == "2"  # no listing again
            assert counts.counts[("stead_watch_resumes_total", None)] == 1
            assert seen.events == [(None, "ns/a", "1"), ("MODIFIED", "ns/a", "2")]  # nothing twice, nothing lost

    scenario(test)


def test_a_selection_changed_while_listing_is_not_listed_until_its_own_listing() -> None:
    """`listed` (and `covers`, which taking a project trusts) speak of the current selection only: a
    listing of the one before, answered after `select`, does not count."""
    async def test(api: FakeApi, kube: KubeClient) -> None:
        api.put("a", {BUCKET_LABEL: "1"}, n=1)
        api.put("b", {BUCKET_LABEL: "2"}, n=1)
        first, second = asyncio.Event(), asyncio.Event()
        api.hold = first
        watch = Watch(kube, PATH, KIND, Seen(), selection=selecting(frozenset({1})), settings=FAST)
        async with running(watch):
            await until(lambda: api.lists, "the first listing asked")
            watch.select(selecting(frozenset({2})))
            api.hold = second
            first.set()
            await until(lambda: len(api.lists) == 2, "the new selection's listing asked")
            assert not watch.listed.is_set() and not watch.covers({BUCKET_LABEL: "2"})
            second.set()
            await listed(watch)
            assert watch.covers({BUCKET_LABEL: "2"}) and not watch.covers({BUCKET_LABEL: "1"})

    scenario(test)
