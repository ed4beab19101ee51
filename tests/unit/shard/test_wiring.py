"""`Sharding`: the projects that exist, the order projects are resumed in, and listing a project."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from operators.catalog import KINDS
from operators.runtime.core.kinds import Kind
from operators.runtime.shard import (
    CLUSTER_PROJECT,
    DEFAULT_BUCKETS,
    BoundedRing,
    Ring,
    bucket_keys,
    bucket_of,
    buckets_of,
)
from operators.runtime.shard.wiring import Sharding, dependencies_first
from tests.unit.fakeapi import FakeApi
from tests.unit.shard.conftest import sync


@dataclasses.dataclass
class Work:
    kind: Kind
    seen: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    rebuilt: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def placements(self) -> set[tuple[str, str]]:
        return self.seen

    def prepare(self, project: str) -> None:
        self.rebuilt[project] = []

    async def drain(self, project: str) -> None:
        return None

    def rebuild(self, project: str, listed: Sequence[Mapping[str, Any]]) -> None:
        self.rebuilt[project] = sorted(str(o["metadata"]["name"]) for o in listed)

    def resume(self, project: str) -> None:
        return None


def test_kinds_are_resumed_after_the_kinds_they_depend_on() -> None:
    ordered = [w.kind.kind for w in dependencies_first([Work(k) for k in reversed(KINDS)])]
    assert sorted(ordered) == sorted(k.kind for k in KINDS)
    for kind in KINDS:
        for dependency in kind.depends_on:
            if dependency != kind.kind and dependency in ordered:
                assert ordered.index(dependency) < ordered.index(kind.kind), (dependency, kind.kind)


@sync
async def test_projects_are_namespaces_labels_and_one_for_cluster_scoped_objects() -> None:
    sharding = Sharding(FakeApi(), "stead-system", "r0")  # type: ignore[arg-type]
    namespaced = next(k for k in KINDS if not k.cluster_scoped)
    work = Work(namespaced, {("team-a", "team-a"), ("team-a", "shop"), ("", "")})
    sharding.works.append(work)
    assert await sharding._projects() == {"team-a", "shop", CLUSTER_PROJECT}
    assert list(sharding.projects_in("team-a")) == ["shop", "team-a"]
    assert list(sharding.projects_in("team-b")) == ["team-b"]


@sync
async def test_a_project_is_listed_from_its_namespace_and_its_label() -> None:
    api = FakeApi()
    kind = next(k for k in KINDS if k.kind == "Environment")
    base = f"/apis/stead.dev/v1alpha1/namespaces/{{}}/{kind.plural}"
    for namespace, name, labels in [("team-a", "plain", {}), ("team-a", "elsewhere", {"stead.dev/project": "shop"}),
                                    ("team-b", "joined", {"stead.dev/project": "team-a"}), ("team-b", "other", {})]:
        await api.request("POST", base.format(namespace), {"metadata": {"name": name, "labels": labels}})
    sharding = Sharding(api, "stead-system", "r0")  # type: ignore[arg-type]
    listed = await sharding._list(kind, "team-a")
    assert sorted(o["metadata"]["name"] for o in listed) == ["joined", "plain"]
    assert {o["kind"] for o in listed} == {"Environment"}


@dataclasses.dataclass
class Covering:
    """A followed watch that has listed the buckets given and knows these objects (namespace, labels)."""

    kind: str
    buckets: set[str]
    objects: list[tuple[str, dict[str, str]]]

    def covers(self, labels: Mapping[str, str]) -> bool:
        return labels.get("stead.dev/shard-bucket") in self.buckets

    def namespaces_where(self, test: Any) -> set[str]:
        return {namespace for namespace, labels in self.objects if test(namespace, labels)}

    def select(self, selection: object) -> None:
        return None


@sync
async def test_a_project_whose_bucket_the_watches_cover_is_listed_only_where_its_objects_are() -> None:
    api = FakeApi()
    env = next(k for k in KINDS if k.kind == "Environment")
    apps = next(k for k in KINDS if k.kind == "App")
    base = f"/apis/stead.dev/v1alpha1/namespaces/{{}}/{env.plural}"
    for namespace, name, labels in [("team-a", "plain", {}), ("team-a", "elsewhere", {"stead.dev/project": "shop"}),
                                    ("team-b", "joined", {"stead.dev/project": "team-a"}), ("team-b", "other", {})]:
        await api.request("POST", base.format(namespace), {"metadata": {"name": name, "labels": labels}})
    sharding = Sharding(api, "stead-system", "r0")  # type: ignore[arg-type]
    bucket = str(bucket_of("team-a"))
    known = [("team-a", {}), ("team-a", {"stead.dev/project": "shop"}), ("team-b", {"stead.dev/project": "team-a"})]
    sharding.follow([Covering("Environment", {bucket}, known), Covering("App", {bucket}, [])])  # type: ignore[list-item]
    before = len(api.calls)
    listed = await sharding._list(env, "team-a")
    assert sorted(o["metadata"]["name"] for o in listed) == ["joined", "plain"]
    assert len(api.calls) - before == 2  # team-a's and team-b's environments; no search by label
    assert await sharding._list(apps, "team-a") == [] and len(api.calls) - before == 2  # no App known: not listed
    # a bucket the watches do not cover (not selected, or not listed yet): searched everywhere
    sharding._watches_of["Environment"] = [Covering("Environment", set(), known)]  # type: ignore[list-item]
    assert sorted(o["metadata"]["name"] for o in await sharding._list(env, "team-a")) == ["joined", "plain"]
    assert len(api.calls) - before == 4


class Counting:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + amount


@sync
async def test_a_project_unowned_for_longer_than_the_lease_is_an_event_and_a_metric_once_per_episode() -> None:
    api = FakeApi()
    metrics = Counting()
    sharding = Sharding(api, "stead-system", "r0", metrics=metrics)  # type: ignore[arg-type]

    def events() -> list[dict[str, Any]]:
        return [r.body for r in api.received if r.method == "POST" and r.path.endswith("/events")]

    sharding.member.unowned = ["shop"]
    await sharding._report_unowned()  # our own lease may have lapsed: counted, not posted
    assert metrics.counts["stead_shard_unowned_total"] == 1 and events() == []
    sharding.member.unowned = []
    await sharding._report_unowned()
    clock = sharding.member.fence._clock
    sharding.member.fence.extend("inc-1", clock(), clock(), 15.0, 3.0)
    for _ in range(2):  # found unowned at two passes in a row: one Event
        sharding.member.unowned = ["shop"]
        await sharding._report_unowned()
    [event] = events()
    assert event["reason"] == "ProjectUnowned" and event["type"] == "Warning"
    assert event["involvedObject"] == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                       "name": "stead-project-shop", "namespace": "stead-system"}
    assert "project shop has had no owner for over 15s" in event["message"]
    assert metrics.counts["stead_shard_unowned_total"] == 2


@sync
async def test_with_bounded_placement_the_replicas_watch_the_buckets_the_bounded_ring_gives_them() -> None:
    """`--placement bounded`, as the operator wires it: each replica's pass builds the bounded ring
    over the live members, and its watches select exactly the buckets that ring places on it."""
    api = FakeApi()
    replicas = [Sharding(api, "stead-system", r, placement="bounded", epsilon=0.01)  # type: ignore[arg-type]
                for r in ("r0", "r1", "r2")]
    for sharding in replicas:
        await sharding.member.member.renew()
    for _ in range(2):
        for sharding in replicas:
            await sharding.member.step()
    expected = BoundedRing(["r0", "r1", "r2"], bucket_keys(), 0.01)
    for sharding in replicas:
        assert isinstance(sharding.member.ring, BoundedRing)
        assert sharding.selected == buckets_of(expected, sharding.replica)
    assert sum(len(s.selected) for s in replicas) == DEFAULT_BUCKETS
    assert max(len(s.selected) for s in replicas) <= expected.capacity
    plain = Ring(["r0", "r1", "r2"])
    assert max(len(buckets_of(plain, r)) for r in ("r0", "r1", "r2")) > expected.capacity  # it makes a difference
