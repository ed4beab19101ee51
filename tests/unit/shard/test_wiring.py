"""`Sharding`: the projects that exist, the order projects are resumed in, and listing a project."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from operators.catalog import KINDS
from operators.runtime.core.kinds import Kind
from operators.runtime.shard import CLUSTER_PROJECT
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
