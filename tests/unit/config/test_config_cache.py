"""The watch-fed cache of the configuration API: events, write-through, snapshots, falling back."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest

from operators.config.cache import OPEN, CachedConfigRepository, ConfigCache, Gone
from operators.config.history import LABEL_UID, LABEL_VERSION
from operators.config.repository import COMPONENTS, ENVIRONMENTS, VALUES, ValuesTarget
from operators.runtime.kube.client import ApiError, custom_path
from tests.unit.fakeapi import FakeApi


def obj(name: str, spec: dict[str, Any], rv: int, uid: str | None = None, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                         "resourceVersion": str(rv)}, "spec": spec}


ENV = obj("e", {"release": "r", "components": ["fuel"],
                "nodes": [{"name": "n1", "fqdn": "n1.tld", "roles": ["compute"]}]}, 1)
FUEL = obj("fuel", {"resources": [{"name": "astute"}]}, 2)
ROOT = obj("root", {"environment": "e", "resource": "astute", "data": {"a": 1}}, 3)


class FakeSource:
    """Lists from `items`; each watch replays `script` (events, or exceptions to raise)."""

    def __init__(self, items: dict[str, list[dict[str, Any]]]) -> None:
        self.items = items
        self.lists: dict[str, int] = {}
        self.scripts: dict[str, list[Any]] = {}
        self.idle = asyncio.Event()

    async def list(self, plural: str) -> tuple[list[dict[str, Any]], str]:
        self.lists[plural] = self.lists.get(plural, 0) + 1
        return list(self.items.get(plural, [])), "1"

    async def watch(self, plural: str, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        script = self.scripts.get(plural) or []
        if script and isinstance(script[0], Exception):
            raise script.pop(0)
        yield {"type": OPEN}
        while script:
            step = script.pop(0)
            if isinstance(step, Exception):
                raise step
            yield step
        self.idle.set()
        await asyncio.Event().wait()  # an open watch with nothing to say


def api() -> FakeApi:
    """The API server for the repository's direct reads and writes, holding ENV, FUEL and ROOT."""
    return FakeApi({custom_path(ENVIRONMENTS, "ns", "e"): ENV, custom_path(COMPONENTS, "ns", "fuel"): FUEL,
                    custom_path(VALUES, "ns", "root"): ROOT})


def test_events_apply_in_order_and_late_ones_do_not_undo_a_write_through() -> None:
    cache = ConfigCache(FakeSource({}))
    cache.replace(VALUES, [ROOT])
    before = cache.stamp("ns")
    newer = obj("root", {**ROOT["spec"], "data": {"a": 2}}, 9)
    cache.observe(VALUES, newer)  # our own write, answered with resourceVersion 9
    assert cache.stamp("ns") != before and cache.stamp("other") == (1, 0)
    assert not cache.apply("MODIFIED", VALUES, obj("root", {**ROOT["spec"], "data": {"a": 1}}, 5))  # late
    held = cache.get(VALUES, "ns", "root")
    assert held is not None and held.spec.data == {"a": 2}
    assert cache.apply("MODIFIED", VALUES, obj("root", {**ROOT["spec"], "data": {"a": 3}}, 10))
    assert cache.apply("ADDED", VALUES, obj("bad", {"nope": 1}, 11))  # kept, marked invalid, never served
    bad = cache.get(VALUES, "ns", "bad")
    assert bad is not None and bad.spec is None and bad.error


def test_a_deletion_through_the_api_is_not_undone_by_a_late_event() -> None:
    cache = ConfigCache(FakeSource({}))
    cache.replace(VALUES, [ROOT])
    cache.forget(VALUES, "ns", "root", "uid-root")
    assert cache.get(VALUES, "ns", "root") is None
    assert not cache.apply("MODIFIED", VALUES, ROOT)  # the object's last change, delivered late
    cache.replace(VALUES, [ROOT])  # a list taken before the deletion
    assert cache.get(VALUES, "ns", "root") is None
    assert not cache.apply("DELETED", VALUES, ROOT)  # the confirmation ends the tombstone
    assert cache.apply("ADDED", VALUES, obj("root", ROOT["spec"], 20, uid="uid-again"))  # a new object of that name


def test_follow_lists_watches_relists_when_gone_and_reads_through_while_broken() -> None:
    async def main() -> None:
        source = FakeSource({ENVIRONMENTS: [ENV], COMPONENTS: [FUEL], VALUES: []})
        source.scripts[VALUES] = [{"type": "ADDED", "object": ROOT}, Gone(VALUES)]
        source.scripts[COMPONENTS] = [ApiError(403, "forbidden")]
        cache = ConfigCache(source, retry=0.01)
        task = asyncio.create_task(cache.run())
        try:
            await asyncio.wait_for(source.idle.wait(), 5)
            for _ in range(500):
                if cache.ready:
                    break
                await asyncio.sleep(0.01)
            assert cache.ready
        finally:
            task.cancel()
        assert source.lists == {ENVIRONMENTS: 1, COMPONENTS: 1, VALUES: 2}  # VALUES listed again after Gone
        assert cache.get(ENVIRONMENTS, "ns", "e") is not None and cache.get(COMPONENTS, "ns", "fuel") is not None
        assert cache.events == 1

    asyncio.run(main())


def ready_cache(*values: dict[str, Any]) -> ConfigCache:
    cache = ConfigCache(FakeSource({}))
    cache.replace(ENVIRONMENTS, [ENV])
    cache.replace(COMPONENTS, [FUEL])
    cache.replace(VALUES, list(values))
    cache._synced.update((ENVIRONMENTS, COMPONENTS, VALUES))
    return cache


def test_snapshots_come_from_memory_and_stay_the_same_object_until_a_change() -> None:
    async def main() -> None:
        kube = api()
        repo = CachedConfigRepository(kube, ready_cache(ROOT))
        first = await repo.snapshot("ns", "e")
        assert first is not None and [v.data for v in first.values] == [{"a": 1}]
        assert await repo.snapshot("ns", "e") is first and await repo.snapshot("ns", "nope") is None
        assert await repo.list_environments("ns") == {"e": first.environment}
        assert kube.calls == []  # no API-server round trip
        # a write goes to the API server and is readable at once
        target = ValuesTarget("e", "astute", "overrides", (), None)
        await repo.write_values("ns", target, {"b": 2}, None)
        second = await repo.snapshot("ns", "e")
        assert second is not first and second is not None
        assert sorted(v.spec.kind for v in second.values) == ["overrides", "values"]
        await repo.delete_values("ns", second.values[0], None)
        third = await repo.snapshot("ns", "e")
        assert third is not None and len(third.values) == 1

    asyncio.run(main())


def test_not_in_sync_reads_go_to_the_api_server() -> None:
    async def main() -> None:
        kube = api()
        repo = CachedConfigRepository(kube, ConfigCache(FakeSource({})))
        snapshot = await repo.snapshot("ns", "e")
        assert snapshot is not None and [v.name for v in snapshot.values] == ["root"]
        assert len(kube.calls) == 3

    asyncio.run(main())


def test_a_reverted_version_is_read_once() -> None:
    async def main() -> None:
        kube = api()
        kube.add("/api/v1/namespaces/ns/configmaps/root-v1",
                 {"metadata": {"name": "root-v1", "labels": {LABEL_UID: "uid-root", LABEL_VERSION: "1"}},
                  "data": {"data.json": json.dumps({"a": "old"})}})
        cache = ready_cache(obj("root", {**ROOT["spec"], "revertTo": 1}, 3))
        repo = CachedConfigRepository(kube, cache)
        snapshot = await repo.snapshot("ns", "e")
        assert snapshot is not None and snapshot.values[0].data == {"a": "old"}
        cache.apply("MODIFIED", VALUES, obj("root", {**ROOT["spec"], "revertTo": 1, "historyLimit": 3}, 4))
        again = await repo.snapshot("ns", "e")
        assert again is not snapshot and again is not None and again.values[0].data == {"a": "old"}
        assert kube.calls == [("GET", "/api/v1/namespaces/ns/configmaps/root-v1")]

    asyncio.run(main())


def test_an_invalid_environment_is_reported() -> None:
    async def main() -> None:
        cache = ready_cache()
        cache.apply("MODIFIED", ENVIRONMENTS, obj("e", {"nodes": "x"}, 30))
        with pytest.raises(Exception, match="invalid spec"):
            await CachedConfigRepository(api(), cache).snapshot("ns", "e")

    asyncio.run(main())


def test_the_kube_source_lists_pages_and_reads_watch_lines_split_anywhere() -> None:
    async def main() -> None:
        from aiohttp import web
        from aiohttp.test_utils import TestServer

        from operators.config.cache import KubeWatchSource
        from operators.runtime.kube.client import ClusterAccess

        async def handler(request: web.Request) -> web.StreamResponse:
            if "watch" not in request.query:
                if "continue" not in request.query:
                    return web.json_response({"metadata": {"continue": "c1"}, "items": [ROOT]})
                return web.json_response({"metadata": {"resourceVersion": "7"}, "items": [FUEL]})
            if request.query["resourceVersion"] == "1":
                return web.json_response({"code": 410}, status=410)
            response = web.StreamResponse()
            await response.prepare(request)
            lines = b"".join(json.dumps(e).encode() + b"\n" for e in [
                {"type": "ADDED", "object": ROOT},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
                {"type": "ERROR", "object": {"kind": "Status", "code": 410}}])
            for start in range(0, len(lines), 7):  # chunks that split lines anywhere
                await response.write(lines[start:start + 7])
            return response

        app = web.Application()
        app.router.add_get("/apis/stead.dev/v1alpha1/configvalues", handler)
        async with TestServer(app) as server:
            access = ClusterAccess(server=str(server.make_url("")).rstrip("/"),
                                   ssl_context=ssl.create_default_context())
            async with KubeWatchSource(access) as source:
                items, rv = await source.list(VALUES)
                assert ([i["metadata"]["name"] for i in items], rv) == (["root", "fuel"], "7")
                seen = []
                with pytest.raises(Gone):
                    async for event in source.watch(VALUES, "7"):
                        seen.append(event["type"])
                assert seen == [OPEN, "ADDED", "BOOKMARK"]
                with pytest.raises(Gone):
                    async for _ in source.watch(VALUES, "1"):
                        pass

    asyncio.run(main())
