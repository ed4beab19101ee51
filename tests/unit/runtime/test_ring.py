"""The ownership ring: deterministic, balanced, and minimal movement when membership changes."""

from __future__ import annotations

from collections import Counter

from operators.runtime.core.ring import Ownership, Ring, StaticMembership, project_of

PROJECTS = [f"project-{i}" for i in range(3000)]


def test_one_replica_owns_everything() -> None:
    owner = Ownership("stead-0", StaticMembership(["stead-0"]))
    assert all(owner.owns(p) for p in PROJECTS[:100])


def test_empty_ring_owns_nothing() -> None:
    assert Ring([]).owner("p") is None


def test_projects_spread_evenly_over_replicas() -> None:
    ring = Ring([f"stead-{i}" for i in range(4)])
    counts = Counter(ring.owner(p) for p in PROJECTS)
    assert set(counts) == {f"stead-{i}" for i in range(4)}
    assert max(counts.values()) < 1.35 * len(PROJECTS) / 4


def test_adding_a_replica_moves_only_its_share() -> None:
    before = Ring(["a", "b", "c"])
    after = Ring(["a", "b", "c", "d"])
    moved = [p for p in PROJECTS if before.owner(p) != after.owner(p)]
    assert all(after.owner(p) == "d" for p in moved)  # nothing moves between old members
    assert 0.15 < len(moved) / len(PROJECTS) < 0.35


def test_refresh_reports_membership_changes() -> None:
    members = {"a"}

    class Live:
        def members(self) -> frozenset[str]:
            return frozenset(members)

    owner = Ownership("a", Live())
    assert not owner.refresh()
    members.add("b")
    assert owner.refresh()
    assert any(not owner.owns(p) for p in PROJECTS[:200])


def test_project_is_the_label_else_the_namespace() -> None:
    assert project_of({"metadata": {"namespace": "ns"}}) == "ns"
    assert project_of({"metadata": {"namespace": "ns", "labels": {"stead.dev/project": "p"}}}) == "p"
