"""The coordinator's decisions, and replicas running them against one (fake) API server."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import replace

from operators.runtime.shard import (
    Claim,
    Liveness,
    MemberLease,
    Ring,
    Sweep,
    Vacancy,
    View,
    bucket_of,
    by_bucket,
    decide,
    execute,
    list_claims,
    owned,
    read_members,
)
from tests.unit.fakeapi import FakeApi
from tests.unit.shard.conftest import FakeTime, sync

NS = "stead-system"
PROJECTS = [f"project-{i}" for i in range(300)]


def held(project: str, holder: str, incarnation: str, epoch: int = 1) -> Claim:
    return Claim(project, holder, incarnation, epoch, resource_version=str(epoch))


# --- pure decisions ------------------------------------------------------------------------------


def test_one_replica_acquires_every_project_then_keeps_them() -> None:
    view = View("a", "ia", {"a": "ia"}, {}, PROJECTS[:20])
    decision = decide(view)
    assert [c.project for c in decision.acquire] == sorted(PROJECTS[:20])
    assert not decision.release and not decision.keep
    claims = {p: held(p, "a", "ia") for p in PROJECTS[:20]}
    again = decide(View("a", "ia", {"a": "ia"}, claims, PROJECTS[:20]))
    assert not again.acquire and not again.release and again.keep == set(PROJECTS[:20])
    assert owned(View("a", "ia", {"a": "ia"}, claims)) == set(PROJECTS[:20])


def test_each_claim_state_leads_to_its_action() -> None:
    live = {"a": "ia", "b": "ib"}
    ring = Ring(["a", "b"])
    ours_to_keep, ours_to_give, free_for_us, free_for_b, dead_for_us, b_holds, old_self = _pick(ring)
    claims = {
        ours_to_keep: held(ours_to_keep, "a", "ia"),
        ours_to_give: held(ours_to_give, "a", "ia"),  # the ring names b
        free_for_b: Claim(free_for_b, epoch=3, resource_version="9"),
        dead_for_us: held(dead_for_us, "gone", "ig"),
        b_holds: held(b_holds, "b", "ib"),  # the ring names a, but b holds it validly: hands off
        old_self: held(old_self, "a", "an-earlier-incarnation"),
    }
    decision = decide(View("a", "ia", live, claims, [free_for_us]), ring=ring)
    assert {c.project for c in decision.acquire} == {free_for_us, dead_for_us, old_self}
    assert [c.project for c in decision.release] == [ours_to_give]
    assert decision.keep == {ours_to_keep}
    assert decision.waiting == {free_for_b}
    assert next(c for c in decision.acquire if c.project == dead_for_us).resource_version == "1"  # the CAS base


def _pick(ring: Ring) -> tuple[str, ...]:
    """Distinct projects, the ring naming: a, b, a, b, a, a, a."""
    a = (p for p in PROJECTS if ring.owner(p) == "a")
    b = (p for p in PROJECTS if ring.owner(p) == "b")
    return next(a), next(b), next(a), next(b), next(a), next(a), next(a)


def test_a_replica_whose_fence_is_closed_does_nothing_and_owns_nothing() -> None:
    claims = {p: held(p, "a", "ia") for p in PROJECTS[:5]}
    view = View("a", None, {"a": "ia"}, claims, PROJECTS[:10])
    decision = decide(view)
    assert not decision.acquire and not decision.release and not decision.keep
    assert "a" not in decision.ring.members
    assert owned(view) == frozenset()


def test_sweep_reports_projects_unowned_for_longer_than_the_lease(clock: FakeTime) -> None:
    sweep = Sweep(grace=15, clock=clock.mono)
    live = {"a": "ia"}
    claims = {"owned": held("owned", "a", "ia"), "dead": held("dead", "gone", "x")}
    assert sweep.update(["owned", "dead", "free"], claims, live) == []
    clock.advance(15.5)
    assert sweep.update(["owned", "dead", "free"], claims, live) == ["dead", "free"]
    assert sweep.unowned_for("free") == 15.5
    claims["free"] = held("free", "a", "ia")
    assert sweep.update(["owned", "dead", "free"], claims, live) == ["dead"]
    assert sweep.unowned_for("free") is None


def test_a_claim_of_ours_whose_project_is_vacant_is_collected_whatever_the_ring_says() -> None:
    live = {"a": "ia", "b": "ib"}
    ring = Ring(["a", "b"])
    ours_for_a, ours_for_b, b_holds, _, free, *_ = _pick(ring)
    claims = {
        ours_for_a: held(ours_for_a, "a", "ia"),
        ours_for_b: held(ours_for_b, "a", "ia"),
        b_holds: held(b_holds, "b", "ib"),
        free: Claim(free, epoch=2, resource_version="5"),
    }
    everything = [ours_for_a, ours_for_b, b_holds, free]
    vacant = decide(View("a", "ia", live, claims, [], vacant=everything), ring=ring)
    # only claims we hold: b's stays b's to collect, the free one is acquired (then collected by its holder)
    assert [c.project for c in vacant.collect] == sorted([ours_for_a, ours_for_b])
    assert not vacant.release and not vacant.keep
    assert [c.project for c in vacant.acquire] == [free]
    assert vacant.collect[0].resource_version == "1"  # the CAS base: the claim as read
    # objects came back since the Vacancy's observation: kept after all
    back = decide(View("a", "ia", live, claims, [ours_for_a], vacant=[ours_for_a]), ring=ring)
    assert not back.collect and back.keep == {ours_for_a}
    # not vacant (yet): an empty project is kept, or handed to the member the ring names
    empty = decide(View("a", "ia", live, claims, []), ring=ring)
    assert not empty.collect and empty.keep == {ours_for_a}
    assert [c.project for c in empty.release] == [ours_for_b]
    # a closed fence collects nothing
    assert not decide(View("a", None, live, claims, [], vacant=everything), ring=ring).collect


def test_vacancy_waits_a_whole_lease_from_the_first_pass_that_saw_the_project_empty(clock: FakeTime) -> None:
    vacancy = Vacancy(grace=15, clock=clock.mono)
    assert vacancy.update(["full", "empty"], {"full"}) == []
    clock.advance(14.5)
    assert vacancy.update(["full", "empty"], {"full"}) == []
    assert vacancy.empty_for("empty") == 14.5 and vacancy.empty_for("full") is None
    clock.advance(0.5)
    assert vacancy.update(["full", "empty"], {"full"}) == ["empty"]
    # objects back for one pass: the clock starts again
    assert vacancy.update(["full", "empty"], {"full", "empty"}) == []
    clock.advance(10)
    assert vacancy.update(["full", "empty"], {"full"}) == []
    clock.advance(10)
    # a project just acquired (held from now on) gets a whole lease, however long it had no objects
    assert vacancy.update(["full", "empty", "new"], {"full"}) == []
    clock.advance(5)
    assert vacancy.update(["full", "empty", "new"], {"full"}) == ["empty"]
    # a project no longer held is forgotten: held again, it starts from zero
    assert vacancy.update(["full"], {"full"}) == []
    assert vacancy.update(["full", "new"], {"full"}) == []
    assert vacancy.empty_for("new") == 0


# --- replicas against one API server ------------------------------------------------------------


class Replica:
    def __init__(self, kube: FakeApi, clock: FakeTime, name: str) -> None:
        self.kube, self.clock, self.name = kube, clock, name
        counter = itertools.count(1)
        self.member = MemberLease(kube, NS, name, duration=15, clock=clock.mono, wall=clock.wall,
                                  incarnations=lambda: f"{name}-{next(counter)}")
        self.liveness = Liveness(clock.mono, clock.wall)
        self.drained: list[str] = []

    async def view(self, projects: list[str]) -> View:
        live = await read_members(self.kube, NS, self.liveness)
        return View(self.name, self.member.incarnation, live, await list_claims(self.kube, NS), projects)

    async def step(self, projects: list[str], renew: bool = True) -> View:
        if renew:
            await self.member.renew()
        view = await self.view(projects)

        async def drain(project: str) -> None:
            self.drained.append(project)

        await execute(self.kube, NS, view, decide(view), self.member.fence, drain=drain, wall=self.clock.wall)
        return view


async def owners(kube: FakeApi, replicas: list[Replica], projects: list[str]) -> dict[str, str]:
    """Who may act on each project now, by each replica's own fresh view; fails on any overlap."""
    acting: dict[str, str] = {}
    for replica in replicas:
        for project in owned(await replica.view(projects)):
            assert project not in acting, f"{project} owned by {acting[project]} and {replica.name}"
            acting[project] = replica.name
    return acting


@sync
async def test_replicas_whose_views_disagree_never_both_acquire(kube: FakeApi, clock: FakeTime) -> None:
    """a has not seen b yet and b has not seen a: both rings say "mine" for every project and
    both try at once; the compare-and-swap leaves exactly one holder per project."""
    a, b = Replica(kube, clock, "a"), Replica(kube, clock, "b")
    await a.member.renew()
    await b.member.renew()
    va = View("a", a.member.incarnation, {"a": "a-1"}, {}, PROJECTS)
    vb = View("b", b.member.incarnation, {"b": "b-1"}, {}, PROJECTS)
    da, db = decide(va), decide(vb)
    assert len(da.acquire) == len(db.acquire) == len(PROJECTS)
    db = replace(db, acquire=db.acquire[::-1])  # they meet in the middle: races on both sides of it
    oa, ob = await asyncio.gather(execute(kube, NS, va, da, a.member.fence, wall=clock.wall),
                                  execute(kube, NS, vb, db, b.member.fence, wall=clock.wall))
    won_a, won_b = {c.project for c in oa.acquired}, {c.project for c in ob.acquired}
    assert won_a.isdisjoint(won_b)
    assert won_a | won_b == set(PROJECTS)
    assert set(oa.lost) == won_b and set(ob.lost) == won_a
    assert won_a and won_b
    creates = [r for r in kube.received
               if r.method == "POST" and r.body["metadata"]["labels"]["stead.dev/role"] == "claim"]
    assert len(creates) == 2 * len(PROJECTS)  # both wrote every project: the API server decided
    claims = await list_claims(kube, NS)
    assert all(c.epoch == 1 for c in claims.values())
    # once their views agree, the ring's owner gets each project: released by the other, then taken
    for _ in range(2):
        for replica in (a, b):
            await replica.step(PROJECTS)
    ring = Ring(["a", "b"])
    assert await owners(kube, [a, b], PROJECTS) == {p: ring.owner(p) for p in PROJECTS}


@sync
async def test_three_replicas_split_the_projects_and_a_fourth_takes_a_quarter(kube: FakeApi, clock: FakeTime) -> None:
    replicas = [Replica(kube, clock, f"stead-{i}") for i in range(3)]
    for replica in replicas:
        await replica.member.renew()
    for _ in range(2):
        for replica in replicas:
            await replica.step(PROJECTS)
            await owners(kube, replicas, PROJECTS)
    before = await owners(kube, replicas, PROJECTS)
    assert set(before) == set(PROJECTS)
    assert before == Ring(r.name for r in replicas).owners(PROJECTS)

    replicas.append(Replica(kube, clock, "stead-3"))
    await replicas[-1].member.renew()
    writes = kube.count("PUT") + kube.count("POST")
    for _ in range(2):  # the old owners release, then the newcomer acquires
        for replica in replicas:
            await replica.step(PROJECTS, renew=False)
            await owners(kube, replicas, PROJECTS)  # never two at once, at any step
    after = await owners(kube, replicas, PROJECTS)
    moved = [p for p in PROJECTS if before[p] != after[p]]
    assert set(after) == set(PROJECTS)
    assert all(after[p] == "stead-3" for p in moved)
    assert 0.25 / 1.2 <= len(moved) / len(PROJECTS) <= 0.25 * 1.2
    assert sorted(p for r in replicas for p in r.drained) == sorted(moved)  # drained before release
    assert kube.count("PUT") + kube.count("POST") - writes == 2 * len(moved)  # one release, one acquire each
    epochs = Counter(c.epoch for c in (await list_claims(kube, NS)).values())
    assert epochs == {1: len(PROJECTS) - len(moved), 2: len(moved)}


@sync
async def test_a_dead_replicas_projects_are_adopted_only_after_its_lease(kube: FakeApi, clock: FakeTime) -> None:
    replicas = [Replica(kube, clock, f"stead-{i}") for i in range(3)]
    for _ in range(2):
        for replica in replicas:
            await replica.step(PROJECTS)
    before = await owners(kube, replicas, PROJECTS)
    dead, survivors = replicas[0], replicas[1:]
    lost = {p for p, r in before.items() if r == dead.name}
    for _ in range(3):  # 14 s without stead-0 renewing: within its lease, its projects stay put
        clock.advance(14 / 3)
        for replica in survivors:
            await replica.step(PROJECTS)
    now = {p: r for p, r in (await owners(kube, survivors, PROJECTS)).items()}
    assert lost.isdisjoint(now)
    assert not dead.member.fence.valid()  # and it could not write any more anyway (deadline 12 s)
    clock.advance(2.1)  # 16.1 s: past the lease and the 1 s of skew tolerated
    for replica in survivors:
        await replica.step(PROJECTS)
    after = await owners(kube, survivors, PROJECTS)
    assert set(after) == set(PROJECTS)
    assert after == Ring(r.name for r in survivors).owners(PROJECTS)
    claims = await list_claims(kube, NS)
    assert {claims[p].epoch for p in lost} == {2}


def test_placement_by_bucket_moves_whole_buckets() -> None:
    key = by_bucket(64)
    ring = Ring(["a", "b"])
    decision = decide(View("a", "ia", {"a": "ia", "b": "ib"}, {}, PROJECTS), placement=key)
    taken = {c.project for c in decision.acquire}
    assert taken == {p for p in PROJECTS if ring.owner(key(p)) == "a"}
    assert {bucket_of(p, 64) for p in taken}.isdisjoint({bucket_of(p, 64) for p in decision.waiting})
