"""`ShardMember`: passes of the coordinator for one replica, its hooks, and a clean hand-over."""

from __future__ import annotations

import itertools

from operators.runtime.shard import (
    BoundedRing,
    Claim,
    Ring,
    ShardMember,
    bucket_keys,
    by_bucket,
    layout,
    list_claims,
)
from tests.unit.fakeapi import FakeApi
from tests.unit.shard.conftest import FakeTime, sync

NS = "stead-system"
PROJECTS = [f"team-{i}" for i in range(60)]


class Recorder:
    def __init__(self) -> None:
        self.acquired: list[tuple[str, int]] = []
        self.drained: list[str] = []

    async def on_acquired(self, claim: Claim) -> None:
        self.acquired.append((claim.project, claim.epoch))

    async def drain(self, project: str) -> None:
        self.drained.append(project)


async def all_projects() -> list[str]:
    return PROJECTS


def replica(kube: FakeApi, clock: FakeTime, name: str, seen: Recorder) -> ShardMember:
    ids = itertools.count(1)
    return ShardMember(kube, NS, name, all_projects, duration=15, drain=seen.drain, on_acquired=seen.on_acquired,
                       clock=clock.mono, wall=clock.wall, incarnations=lambda: f"{name}-{next(ids)}")


def owners(members: list[ShardMember]) -> dict[str, str]:
    acting: dict[str, str] = {}
    for member in members:
        for project in member.owned():
            assert project not in acting, project
            acting[project] = member.replica
    return acting


@sync
async def test_members_split_the_projects_as_the_ring_says(kube: FakeApi, clock: FakeTime) -> None:
    seen = {n: Recorder() for n in ("a", "b", "c")}
    members = [replica(kube, clock, n, seen[n]) for n in seen]
    for member in members:
        await member.member.renew()
    for _ in range(2):
        for member in members:
            await member.step()
            owners(members)
    assert owners(members) == Ring(["a", "b", "c"]).owners(PROJECTS)
    assert sorted(p for r in seen.values() for p, _ in r.acquired) == sorted(PROJECTS)
    assert {e for r in seen.values() for _, e in r.acquired} == {1}
    assert all(m.owns(p) == (owners(members)[p] == m.replica) for m in members for p in PROJECTS)
    assert all(m.unowned == [] for m in members)


@sync
async def test_a_clean_hand_over_is_adopted_at_the_next_pass(kube: FakeApi, clock: FakeTime) -> None:
    seen = {n: Recorder() for n in ("a", "b")}
    a, b = (replica(kube, clock, n, seen[n]) for n in seen)
    for member in (a, b):
        await member.member.renew()
    for _ in range(2):
        await a.step()
        await b.step()
    theirs = set(a.owned())
    await a.hand_over()
    await a.member.release()
    assert a.owned() == {} and sorted(seen["a"].drained) == sorted(theirs)
    await b.step()  # no time passes: the releases let b in at once
    assert set(b.owned()) == set(PROJECTS)
    assert {p: e for p, e in b.owned().items() if p in theirs} == dict.fromkeys(theirs, 2)


@sync
async def test_a_replica_paused_past_its_lease_owns_nothing_on_waking(kube: FakeApi, clock: FakeTime) -> None:
    seen = Recorder()
    a = replica(kube, clock, "a", seen)
    await a.member.renew()
    await a.step()
    assert set(a.owned()) == set(PROJECTS)
    clock.advance(12.01)  # past the fence (15 s - 3 s margin): owns() is False before any pass runs
    assert a.owned() == {} and not a.owns(PROJECTS[0])
    await a.member.renew()  # wakes up: a new incarnation, the old claims void
    assert a.owned() == {}
    await a.step()
    assert set(a.owned()) == set(PROJECTS)
    assert set(a.owned().values()) == {2}  # re-acquired at a new epoch: rebuilt, not trusted


@sync
async def test_a_project_whose_rebuild_failed_is_not_acted_on_until_it_succeeds(kube: FakeApi, clock: FakeTime) -> None:
    failing = {"team-3"}
    adopted: list[str] = []

    async def on_acquired(claim: Claim) -> None:
        if claim.project in failing:
            raise RuntimeError("the API server listing failed")
        adopted.append(claim.project)

    a = ShardMember(kube, NS, "a", all_projects, duration=15, on_acquired=on_acquired, clock=clock.mono,
                    wall=clock.wall)
    await a.member.renew()
    await a.step()
    assert not a.owns("team-3") and a.owns("team-4")  # claimed, but not rebuilt
    await a.step()
    assert not a.owns("team-3")
    failing.clear()
    await a.step()  # retried from the claim it already holds: no second acquisition
    assert a.owns("team-3") and a.owned()["team-3"] == 1
    assert adopted.count("team-3") == 1 and len(adopted) == len(PROJECTS)


@sync
async def test_on_ready_runs_once_the_project_is_ours_and_a_project_lost_while_paused_is_drained(
        kube: FakeApi, clock: FakeTime) -> None:
    seen = Recorder()
    ready: list[tuple[str, bool]] = []
    a: ShardMember

    async def on_ready(project: str) -> None:
        ready.append((project, a.owns(project)))

    a = ShardMember(kube, NS, "a", all_projects, duration=15, drain=seen.drain, on_acquired=seen.on_acquired,
                    on_ready=on_ready, clock=clock.mono, wall=clock.wall)
    await a.member.renew()
    await a.step()
    assert sorted(ready) == sorted((p, True) for p in PROJECTS)  # owns() was already True in the hook
    clock.advance(16.5)  # paused past the lease (and the others' skew)
    b = replica(kube, clock, "b", Recorder())
    await b.member.renew()
    await b.step()  # b takes everything over
    assert set(b.owned()) == set(PROJECTS)
    await a.member.renew()  # a wakes up, a new incarnation
    await a.step()
    assert sorted(seen.drained) == sorted(PROJECTS)  # its work on them stopped, though nothing was handed over
    assert a.owned() == {}


@sync
async def test_claims_of_projects_without_objects_are_deleted_by_their_holders_after_a_lease(
        kube: FakeApi, clock: FakeTime) -> None:
    existing = set(PROJECTS)
    counted: list[tuple[str, float]] = []

    async def listed() -> set[str]:
        return set(existing)

    seen = {n: Recorder() for n in ("a", "b")}
    a, b = (ShardMember(kube, NS, n, listed, duration=15, drain=seen[n].drain, on_acquired=seen[n].on_acquired,
                        clock=clock.mono, wall=clock.wall, count=lambda name, n: counted.append((name, n)))
            for n in seen)

    async def passes(seconds: float) -> None:
        for member in (a, b):
            await member.member.renew()
            await member.step()
        clock.advance(seconds)

    await passes(0)
    await passes(0)
    before = {p: c.uid for p, c in (await list_claims(kube, NS)).items()}
    assert set(before) == existing
    for recorder in seen.values():  # a took everything before b was live, then handed b its share
        recorder.drained.clear()
    gone = {f"team-{i}" for i in range(6)}
    blinking = "team-7"  # empty for a while, then objects again: kept
    existing -= gone | {blinking}
    await passes(5)
    await passes(5)
    existing.add(blinking)
    await passes(4.5)
    await passes(0)
    assert set(await list_claims(kube, NS)) == set(PROJECTS)  # a pass 14.5 s after they emptied: not yet
    existing.discard(blinking)  # its clock starts again here
    await passes(0.5)
    await passes(0)
    claims = await list_claims(kube, NS)
    assert set(claims) == set(PROJECTS) - gone  # the deleted projects' claims went, nothing else
    assert {p: c.uid for p, c in claims.items()} == {p: u for p, u in before.items() if p not in gone}
    assert a.collected + b.collected == len(gone) and sum(n for _, n in counted) == len(gone)
    assert {name for name, _ in counted} == {"stead_shard_claims_collected_total"}
    assert sorted(seen["a"].drained + seen["b"].drained) == sorted(gone)  # drained first, each by its holder
    assert not any(m.owns(p) for m in (a, b) for p in gone)
    deletes = [r for r in kube.received if r.method == "DELETE"]
    assert {r.path.rsplit("/", 1)[1]: r.body["preconditions"]["uid"] for r in deletes} == {
        f"stead-project-{p}": before[p] for p in gone}

    # a project that comes back is claimed afresh: a new Lease (epoch 1, another uid), rebuilt
    existing.add("team-0")
    await passes(0)
    back = (await list_claims(kube, NS))["team-0"]
    assert back.epoch == 1 and back.uid != before["team-0"]
    holder = a if back.holder == "a" else b
    assert holder.owns("team-0") and ("team-0", 1) in seen[holder.replica].acquired[-1:]
    await passes(7)
    assert "team-7" in await list_claims(kube, NS)
    await passes(8)  # its clock ran from its last emptying: a whole lease by the next pass
    await passes(0)
    assert "team-7" not in await list_claims(kube, NS)
    assert kube.count("DELETE") == len(gone) + 1  # one conditional delete per claim collected, no retries


@sync
async def test_with_bounded_placement_the_claims_follow_the_bounded_ring_of_the_buckets(
        kube: FakeApi, clock: FakeTime) -> None:
    seen = {n: Recorder() for n in ("a", "b", "c")}
    ids = itertools.count(1)
    members = [ShardMember(kube, NS, n, all_projects, duration=15, drain=seen[n].drain, clock=clock.mono,
                           wall=clock.wall, incarnations=lambda: f"i-{next(ids)}", placement=by_bucket(),
                           layout=layout("bounded", 0.01)) for n in seen]
    for member in members:
        await member.member.renew()
    for _ in range(2):
        for member in members:
            await member.step()
    bounded, key = BoundedRing(["a", "b", "c"], bucket_keys(), 0.01), by_bucket()
    assert owners(members) == {p: bounded.owner(key(p)) for p in PROJECTS}
    assert owners(members) != {p: Ring(["a", "b", "c"]).owner(key(p)) for p in PROJECTS}  # not the plain ring's
