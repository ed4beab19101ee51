"""The watch-fed cache of the configuration API: events, write-through, snapshots, falling back."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from operators.config.cache import PLURALS, CachedConfigRepository, ConfigCache
from operators.config.history import LABEL_UID, LABEL_VERSION
from operators.config.repository import COMPONENTS, ENVIRONMENTS, VALUES, ValuesTarget
from operators.runtime.kube.client import custom_path
from operators.runtime.kube.watch import Watch
from tests.unit.fakeapi import FakeApi
from tests.unit.runtime.test_watch import FAST, PATH, until
from tests.unit.runtime.test_watch import FakeApi as FakeServer
from tests.unit.runtime.test_watch import client as kube_client


def obj(name: str, spec: dict[str, Any], rv: int, uid: str | None = None, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                         "resourceVersion": str(rv)}, "spec": spec}


ENV = obj("e", {"release": "r", "components": ["fuel"],
                "nodes": [{"name": "n1", "fqdn": "n1.tld", "roles": ["compute"]}]}, 1)
FUEL = obj("fuel", {"resources": [{"name": "astute"}]}, 2)
ROOT = obj("root", {"environment": "e", "resource": "astute", "data": {"a": 1}}, 3)


def api() -> FakeApi:
    """The API server for the repository's direct reads and writes, holding ENV, FUEL and ROOT."""
    return FakeApi({custom_path(ENVIRONMENTS, "ns", "e"): ENV, custom_path(COMPONENTS, "ns", "fuel"): FUEL,
                    custom_path(VALUES, "ns", "root"): ROOT})


def test_events_apply_in_order_and_late_ones_do_not_undo_a_write_through() -> None:
    cache = ConfigCache()
    cache.apply("ADDED", VALUES, ROOT)
    before = cache.stamp("ns")
    newer = obj("root", {**ROOT["spec"], "data": {"a": 2}}, 9)
    cache.observe(VALUES, newer)  # our own write, answered with resourceVersion 9
    assert cache.stamp("ns") != before and cache.stamp("other") == 0
    assert not cache.apply("MODIFIED", VALUES, obj("root", {**ROOT["spec"], "data": {"a": 1}}, 5))  # late
    held = cache.get(VALUES, "ns", "root")
    assert held is not None and held.spec.data == {"a": 2}
    assert cache.apply("MODIFIED", VALUES, obj("root", {**ROOT["spec"], "data": {"a": 3}}, 10))
    assert cache.apply("ADDED", VALUES, obj("bad", {"nope": 1}, 11))  # kept, marked invalid, never served
    bad = cache.get(VALUES, "ns", "bad")
    assert bad is not None and bad.spec is None and bad.error


def test_a_status_write_keeps_the_parsed_spec_and_a_new_generation_is_parsed_again() -> None:
    """The operator's own status PATCH comes back as a MODIFIED event of the same generation: its spec
    is the one parsed already (issue 32: parsing it again was 5% of the operator's CPU per object)."""
    cache = ConfigCache()
    first = {**ENV, "metadata": {**ENV["metadata"], "generation": 1}}
    cache.apply("ADDED", ENVIRONMENTS, first)
    parsed = cache.get(ENVIRONMENTS, "ns", "e")
    assert parsed is not None and parsed.spec is not None
    status_written = {**first, "metadata": {**first["metadata"], "resourceVersion": "7"}, "status": {"phase": "X"}}
    assert cache.apply("MODIFIED", ENVIRONMENTS, status_written)
    held = cache.get(ENVIRONMENTS, "ns", "e")
    assert held is not None and held.body is status_written and held.spec is parsed.spec
    edited = {"metadata": {**first["metadata"], "resourceVersion": "8", "generation": 2},
              "spec": {**ENV["spec"], "release": "r2"}}
    assert cache.apply("MODIFIED", ENVIRONMENTS, edited)
    held = cache.get(ENVIRONMENTS, "ns", "e")
    assert held is not None and held.spec is not parsed.spec and held.spec.release == "r2"


def test_a_deletion_through_the_api_is_not_undone_by_a_late_event() -> None:
    cache = ConfigCache()
    cache.apply("ADDED", VALUES, ROOT)
    cache.forget(VALUES, "ns", "root", "uid-root")
    assert cache.get(VALUES, "ns", "root") is None
    assert not cache.apply("MODIFIED", VALUES, ROOT)  # the object's last change, delivered late
    assert not cache.apply("ADDED", VALUES, ROOT)  # a listing taken before the deletion
    assert cache.get(VALUES, "ns", "root") is None
    assert not cache.apply("DELETED", VALUES, ROOT)  # the confirmation ends the tombstone
    assert cache.apply("ADDED", VALUES, obj("root", ROOT["spec"], 20, uid="uid-again"))  # a new object of that name


def test_the_cache_follows_watches_from_their_first_listing_and_reads_through_while_one_fails() -> None:
    """Real `Watch`es (one fake API server per kind) tapped by the cache: the first listing fills it,
    events change it, and while a watch fails to list the cache is not ready (reads go to the API)."""
    async def main() -> None:
        servers = {plural: FakeServer() for plural in PLURALS}
        servers[VALUES].put("root", **ROOT["spec"])
        servers[ENVIRONMENTS].put("e", **ENV["spec"])
        async with contextlib.AsyncExitStack() as stack:
            kubes = {}
            for plural, server in servers.items():
                test_server = await stack.enter_async_context(TestServer(server.app, host="127.0.0.1"))
                kubes[plural] = await stack.enter_async_context(kube_client(str(test_server.make_url(""))))
                stack.callback(server.close)
            watches = {plural: Watch(kubes[plural], PATH, plural, None, settings=FAST) for plural in PLURALS}
            cache = ConfigCache()
            cache.follow(watches)
            tasks = [asyncio.create_task(w.run()) for w in watches.values()]
            stack.callback(lambda: [t.cancel() for t in tasks])
            await until(lambda: cache.ready, "the cache in sync")
            held = cache.get(VALUES, "ns", "root")
            assert held is not None and held.spec.data == {"a": 1} and cache.get(ENVIRONMENTS, "ns", "e") is not None
            await until(lambda: servers[VALUES].streams, "the values watch")
            servers[VALUES].send("MODIFIED", servers[VALUES].put("root", **{**ROOT["spec"], "data": {"a": 2}}))
            await until(lambda: (cache.get(VALUES, "ns", "root") or held).spec.data == {"a": 2}, "the change")
            servers[VALUES].send("DELETED", servers[VALUES].remove("root"))
            await until(lambda: cache.get(VALUES, "ns", "root") is None, "the deletion")
            servers[COMPONENTS].list_failures = 1_000  # the components' API answers 500 from now on
            servers[COMPONENTS].gone()
            await until(lambda: not cache.ready, "the cache out of sync")
            servers[COMPONENTS].list_failures = 0
            await until(lambda: cache.ready, "the cache in sync again")
            assert cache.events == 4  # two listed, one change, one deletion

    asyncio.run(asyncio.wait_for(main(), 10))


class Synced:
    """A watch that has listed and follows (for a cache filled by hand)."""

    in_sync = True

    def add_tap(self, tap: object) -> None:
        return None


def ready_cache(*values: dict[str, Any]) -> ConfigCache:
    cache = ConfigCache()
    cache.follow({plural: Synced() for plural in PLURALS})  # type: ignore[misc]
    cache.apply("ADDED", ENVIRONMENTS, ENV)
    cache.apply("ADDED", COMPONENTS, FUEL)
    for body in values:
        cache.apply("ADDED", VALUES, body)
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
        repo = CachedConfigRepository(kube, ConfigCache())
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
