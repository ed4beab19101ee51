"""Claims: taken by compare-and-swap only when free or when the holder is dead; epochs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.runtime.shard import (
    Claim,
    ClaimMismatch,
    Fence,
    FenceExpired,
    acquire,
    claim_name,
    collect,
    leases_path,
    list_claims,
    read_claim,
    release,
)
from tests.unit.fakeapi import FakeApi
from tests.unit.shard.conftest import FakeTime, sync

NS = "stead-system"


def fence(clock: FakeTime, incarnation: str) -> Fence:
    f = Fence(clock.mono)
    f.extend(incarnation, clock.mono(), clock.mono(), duration=15, margin=3)
    return f


def test_claim_names_are_readable_where_they_can_be_and_never_collide() -> None:
    assert claim_name("team-a") == "stead-project-team-a"
    hashed = claim_name("Team_A")
    assert hashed.startswith("stead-project.") and len(hashed) == len("stead-project.") + 16
    assert claim_name("Team_A") == hashed  # stable
    assert claim_name("team.a").startswith("stead-project.")  # a DNS label has no '.': the forms never meet
    with pytest.raises(ValueError):
        claim_name("")


@sync
async def test_a_project_never_claimed_is_created_with_epoch_one(kube: FakeApi, clock: FakeTime) -> None:
    claim = await read_claim(kube, NS, "team-a")
    assert not claim.exists and claim.free and claim.epoch == 0
    taken = await acquire(kube, NS, claim, "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert taken is not None
    assert (taken.holder, taken.incarnation, taken.epoch) == ("stead-0", "i0", 1)
    obj = kube.objects[leases_path(NS, "stead-project-team-a")]
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/name": "stead", "stead.dev/role": "claim",
                                         "stead.dev/project": "team-a"}
    assert obj["metadata"]["annotations"] == {"stead.dev/holder-incarnation": "i0"}
    assert obj["spec"]["holderIdentity"] == "stead-0" and obj["spec"]["leaseTransitions"] == 1
    assert await read_claim(kube, NS, "team-a") == taken


@sync
async def test_a_claim_held_by_a_live_member_is_not_taken(kube: FakeApi, clock: FakeTime) -> None:
    held = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert held is not None
    writes = len(kube.received)
    assert await acquire(kube, NS, held, "stead-1", fence(clock, "i1"), live={"stead-0": "i0"}) is None
    assert len(kube.received) == writes  # refused without a request


@sync
async def test_a_dead_holders_claim_is_taken_over_with_the_next_epoch(kube: FakeApi, clock: FakeTime) -> None:
    held = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert held is not None
    taken = await acquire(kube, NS, held, "stead-1", fence(clock, "i1"), live={"stead-1": "i1"}, wall=clock.wall)
    assert taken is not None and (taken.holder, taken.epoch) == ("stead-1", 2)


@sync
async def test_a_claim_of_a_past_incarnation_is_void_even_for_its_own_replica(kube: FakeApi, clock: FakeTime) -> None:
    held = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "old"), live={}, wall=clock.wall)
    assert held is not None
    assert not held.valid({"stead-0": "new"})
    again = await acquire(kube, NS, held, "stead-0", fence(clock, "new"), live={"stead-0": "new"}, wall=clock.wall)
    assert again is not None and (again.incarnation, again.epoch) == ("new", 2)  # rebuilt, not trusted


@sync
async def test_holding_it_already_costs_no_write(kube: FakeApi, clock: FakeTime) -> None:
    ours = fence(clock, "i0")
    held = await acquire(kube, NS, Claim("p"), "stead-0", ours, live={}, wall=clock.wall)
    assert held is not None
    writes = len(kube.received)
    assert await acquire(kube, NS, held, "stead-0", ours, live={"stead-0": "i0"}) == held
    assert len(kube.received) == writes


@sync
async def test_of_two_concurrent_acquirers_exactly_one_wins(kube: FakeApi, clock: FakeTime) -> None:
    """Both read the same claim (absent, then released, then with a dead holder) and both write:
    the API server's create (409 when it exists) and resourceVersion check decide."""
    for round_ in range(3):
        a, b = fence(clock, f"ia{round_}"), fence(clock, f"ib{round_}")  # the holder of round 1 is dead in round 2
        claim = await read_claim(kube, NS, "contested")
        results = await asyncio.gather(acquire(kube, NS, claim, "stead-a", a, live={}, wall=clock.wall),
                                       acquire(kube, NS, claim, "stead-b", b, live={}, wall=clock.wall))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, round_
        assert await read_claim(kube, NS, "contested") == winners[0]
        assert winners[0].epoch == round_ + 1
        if round_ == 0:
            await release(kube, NS, winners[0], winners[0].holder, wall=clock.wall)


@sync
async def test_release_keeps_the_epoch_and_another_member_acquires_next(kube: FakeApi, clock: FakeTime) -> None:
    held = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert held is not None
    freed = await release(kube, NS, held, "stead-0", wall=clock.wall)
    assert freed is not None and freed.free and freed.epoch == 1
    assert "holderIdentity" not in kube.objects[leases_path(NS, "stead-project-p")]["spec"]
    taken = await acquire(kube, NS, freed, "stead-1", fence(clock, "i1"), live={"stead-0": "i0"}, wall=clock.wall)
    assert taken is not None and (taken.holder, taken.epoch) == ("stead-1", 2)


@sync
async def test_a_release_never_frees_what_was_taken_over_meanwhile(kube: FakeApi, clock: FakeTime) -> None:
    held = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert held is not None
    assert await acquire(kube, NS, held, "stead-1", fence(clock, "i1"), live={}, wall=clock.wall) is not None
    assert await release(kube, NS, held, "stead-0") is None  # our version is stale: 409
    assert (await read_claim(kube, NS, "p")).holder == "stead-1"
    assert await release(kube, NS, await read_claim(kube, NS, "p"), "stead-0") is None  # not ours: no request


@sync
async def test_a_replica_whose_fence_is_closed_takes_nothing(kube: FakeApi, clock: FakeTime) -> None:
    closed = Fence(clock.mono)
    with pytest.raises(FenceExpired):
        await acquire(kube, NS, Claim("p"), "stead-0", closed, live={})
    assert kube.received == []


@sync
async def test_claims_are_listed_by_project_and_hand_written_leases_are_ignored(kube: FakeApi, clock: FakeTime) -> None:
    for project in ("team-a", "Team_B"):
        await acquire(kube, NS, Claim(project), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    labels: dict[str, Any] = {"app.kubernetes.io/name": "stead", "stead.dev/role": "claim", "stead.dev/project": "x"}
    kube.add(leases_path(NS, "not-a-claim-name"), {"metadata": {"labels": labels}, "spec": {"holderIdentity": "z"}})
    claims = await list_claims(kube, NS)
    assert sorted(claims) == ["Team_B", "team-a"]
    assert claims["Team_B"].holder == "stead-0"


@sync
async def test_a_claim_lease_naming_another_project_is_not_its_claim(kube: FakeApi) -> None:
    kube.add(leases_path(NS, claim_name("p")), {"metadata": {"labels": {"stead.dev/project": "q"}}, "spec": {}})
    with pytest.raises(ClaimMismatch):
        await read_claim(kube, NS, "p")


@sync
async def test_the_holder_deletes_its_claim_only_as_it_read_it(kube: FakeApi, clock: FakeTime) -> None:
    """`collect` is a compare-and-swap delete: the uid and resourceVersion read are preconditions."""
    held = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert held is not None and held.uid
    path = leases_path(NS, "stead-project-p")
    assert await collect(kube, NS, held, "stead-1") is False  # not the holder: no request at all
    assert kube.count("DELETE") == 0
    taken = await acquire(kube, NS, held, "stead-1", fence(clock, "i1"), live={}, wall=clock.wall)
    assert taken is not None
    assert await collect(kube, NS, held, "stead-0") is False  # changed hands since it was read: 409
    assert kube.count("DELETE", path) == 1 and path in kube.objects
    sent = kube.received[-1].body
    assert sent["preconditions"] == {"uid": held.uid, "resourceVersion": held.resource_version}
    assert await collect(kube, NS, taken, "stead-1") is True
    assert path not in kube.objects
    assert await collect(kube, NS, taken, "stead-1") is False  # already gone: 404


@sync
async def test_a_claim_created_again_after_collection_is_another_term(kube: FakeApi, clock: FakeTime) -> None:
    """Deleted and created again, a claim restarts at epoch 1: the uid tells the two apart."""
    first = await acquire(kube, NS, Claim("p"), "stead-0", fence(clock, "i0"), live={}, wall=clock.wall)
    assert first is not None and await collect(kube, NS, first, "stead-0")
    again = await acquire(kube, NS, await read_claim(kube, NS, "p"), "stead-0", fence(clock, "i0"), live={},
                          wall=clock.wall)
    assert again is not None and again.epoch == first.epoch == 1
    assert again.term != first.term
    kube.objects[leases_path(NS, "stead-project-p")]["metadata"]["resourceVersion"] = first.resource_version
    # even were the resourceVersion the same, the uid precondition keeps the old read from deleting it
    assert await collect(kube, NS, first, "stead-0") is False
    assert leases_path(NS, "stead-project-p") in kube.objects
