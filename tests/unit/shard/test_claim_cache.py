"""`ClaimCache`: the claims as one WATCH keeps them, with our own writes in front of a lagging watch;
and `ShardMember` reading it instead of a LIST every pass."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from operators.runtime.kube.client import ApiError
from operators.runtime.shard import Claim, ClaimCache, ShardMember, claim_name, leases_path, list_claims
from tests.unit.fakeapi import FakeApi
from tests.unit.shard.conftest import FakeTime, sync

NS = "stead-system"
PROJECTS = [f"team-{i}" for i in range(30)]


def lease(project: str, version: int, holder: str = "", incarnation: str = "", name: str | None = None,
          uid: str = "u1") -> dict[str, Any]:
    """A claim Lease as the watch delivers it."""
    meta: dict[str, Any] = {"name": name or claim_name(project), "namespace": NS, "uid": uid,
                            "resourceVersion": str(version),
                            "labels": {"app.kubernetes.io/name": "stead", "stead.dev/role": "claim",
                                       "stead.dev/project": project}}
    if incarnation:
        meta["annotations"] = {"stead.dev/holder-incarnation": incarnation}
    spec: dict[str, Any] = {"leaseTransitions": 1}
    if holder:
        spec["holderIdentity"] = holder
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def claim(project: str, version: int, holder: str = "", incarnation: str = "") -> Claim:
    return Claim.from_lease(lease(project, version, holder, incarnation))


def test_the_cache_follows_the_watch_and_ignores_leases_that_are_nobodys_claim() -> None:
    cache = ClaimCache()
    cache.tap(None, lease("team-a", 5))
    cache.tap("ADDED", lease("team-b", 6, "r0", "i0"))
    cache.tap("ADDED", lease("team-c", 7, name="stead-project-by-hand"))  # not team-c's claim name
    assert set(cache.claims()) == {"team-a", "team-b"}
    cache.tap("MODIFIED", lease("team-a", 8, "r1", "i1"))
    assert cache.claims()["team-a"].held_by("r1", "i1")
    cache.tap("DELETED", lease("team-b", 9, "r0", "i0"))
    assert set(cache.claims()) == {"team-a"}
    assert not cache.in_sync  # no watch: a pass LISTs


def test_our_write_stays_in_front_of_a_watch_that_has_not_delivered_it() -> None:
    cache = ClaimCache()
    cache.tap(None, lease("team-a", 10))
    cache.wrote(claim("team-a", 20, "r0", "i0"))  # acquired: the next pass must see it ours
    assert cache.claims()["team-a"].held_by("r0", "i0")
    cache.tap("MODIFIED", lease("team-a", 15))  # an older write, late: not in front of ours
    assert cache.claims()["team-a"].held_by("r0", "i0")
    cache.tap("MODIFIED", lease("team-a", 20, "r0", "i0"))  # ours, delivered
    cache.tap("MODIFIED", lease("team-a", 30))  # then anyone's newer write is what there is
    assert cache.claims()["team-a"].free


def test_a_released_claim_never_comes_back_as_ours_from_a_late_event() -> None:
    cache = ClaimCache()
    cache.tap(None, lease("team-a", 10))
    cache.wrote(claim("team-a", 20, "r0", "i0"))
    cache.wrote(claim("team-a", 21))  # released before the watch delivered the acquisition
    cache.tap("MODIFIED", lease("team-a", 20, "r0", "i0"))  # the acquisition's event, late
    assert cache.claims()["team-a"].free
    cache.tap("MODIFIED", lease("team-a", 25, "r1", "i1"))  # taken by r1 since: newer than our release
    assert cache.claims()["team-a"].held_by("r1", "i1")


def test_a_deleted_claim_stays_deleted_until_it_is_created_again() -> None:
    cache = ClaimCache()
    cache.tap(None, lease("team-a", 10, "r0", "i0"))
    cache.deleted(claim("team-a", 10, "r0", "i0"))  # collected (the DELETE's precondition: version 10)
    assert "team-a" not in cache.claims()
    cache.tap("MODIFIED", lease("team-a", 10, "r0", "i0"))  # the version deleted, delivered late
    assert "team-a" not in cache.claims()
    cache.tap("ADDED", lease("team-a", 40, "r1", "i1", uid="u2"))  # created again by r1
    assert cache.claims()["team-a"].held_by("r1", "i1")


def test_a_deleted_event_always_removes_a_claim() -> None:
    """Even one we wrote later: at worst a claim of ours is missed for a pass (drained and adopted
    again), never one that is not ours is kept."""
    cache = ClaimCache()
    cache.wrote(claim("team-a", 50, "r0", "i0"))
    cache.tap("DELETED", lease("team-a", 40))
    assert "team-a" not in cache.claims()


def test_a_list_stays_in_front_of_a_lagging_watch() -> None:
    cache = ClaimCache()
    cache.tap(None, lease("team-a", 10, "r0", "i0"))
    cache.tap(None, lease("team-b", 11, "r0", "i0"))
    cache.listed({"team-b": claim("team-b", 30)})  # team-a deleted and team-b released meanwhile
    assert set(cache.claims()) == {"team-b"} and cache.claims()["team-b"].free
    cache.tap("MODIFIED", lease("team-a", 10, "r0", "i0"))
    cache.tap("MODIFIED", lease("team-b", 20, "r0", "i0"))
    assert set(cache.claims()) == {"team-b"} and cache.claims()["team-b"].free
    cache.tap("ADDED", lease("team-a", 31, "r1", "i1"))
    assert cache.claims()["team-a"].held_by("r1", "i1")


class Synced(ClaimCache):
    """A cache whose watch is in sync but delivers nothing (the worst lag): only our writes reach it."""

    @property
    def in_sync(self) -> bool:
        return True


def member(kube: FakeApi, clock: FakeTime, name: str, cache: ClaimCache | None) -> ShardMember:
    ids = itertools.count(1)

    async def listing() -> list[str]:
        return PROJECTS

    return ShardMember(kube, NS, name, listing, duration=15, clock=clock.mono, wall=clock.wall,
                       incarnations=lambda: f"{name}-{next(ids)}", claims=cache)


@sync
async def test_passes_read_the_cache_and_what_they_wrote_is_theirs_before_the_watch_brings_it(
        kube: FakeApi, clock: FakeTime) -> None:
    a = member(kube, clock, "a", Synced())
    await a.member.renew()
    for _ in range(3):
        await a.step()
    assert set(a.owned()) == set(PROJECTS) and set(a.owned().values()) == {1}  # kept, not lost and re-taken
    assert a.listed == 0
    assert kube.count("GET", leases_path(NS)) == 3  # the member Leases' LIST only, once a pass
    assert kube.count("POST", leases_path(NS)) == 1 + len(PROJECTS)  # our membership, then each claim once
    assert kube.count("PUT") == 0


@sync
async def test_a_pass_reads_a_list_while_the_watch_is_not_in_sync_and_after_a_failed_write(
        kube: FakeApi, clock: FakeTime) -> None:
    b = member(kube, clock, "b", ClaimCache())
    await b.member.renew()
    await b.step()
    assert b.listed == 1  # no watch in sync: a LIST, as before
    a = member(kube, clock, "a", Synced())
    await a.member.renew()
    await a.step()  # nothing delivered yet: its creates lose to b's claims (409), and it reads no LIST
    assert a.listed == 0 and a.owned() == {}
    await b.hand_over()
    await b.member.release()
    kube.fail_with(ApiError(500, "etcd leader changed"), "PUT", "/leases/stead-project-team-1")
    assert a.claims is not None
    a.claims.listed(await list_claims(kube, NS))  # the watch brings b's releases
    with pytest.raises(ApiError):  # one write's answer is lost
        await a.step()
    kube.fail_with(None, "PUT", "/leases/stead-project-team-1")
    await a.step()
    assert a.listed == 1  # the pass after a failed write LISTs
    await a.step()
    assert a.listed == 1 and set(a.owned()) == set(PROJECTS)  # then the cache again
