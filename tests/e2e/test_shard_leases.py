"""Membership Leases and project claims against a real kube-apiserver (issue 17's building blocks).

Each replica is simulated by its own `KubeClient` (its own connections) in one event loop; lease
durations are 1-2 s, and every wait polls what it waits for with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from operators.cluster import ClusterInfo
from operators.runtime.kube.client import KubeClient, load_access
from operators.runtime.shard import (
    Claim,
    ClaimCache,
    FenceExpired,
    Liveness,
    MemberLease,
    Ring,
    ShardMember,
    acquire,
    collect,
    default_clock,
    leases_path,
    list_claims,
    read_claim,
    read_members,
    release,
)
from tests.e2e.conftest import Kubectl

T = TypeVar("T")
SKEW = 0.2  # one machine: the wall clocks are the same clock
POLL = 0.02


async def until(probe: Callable[[], Awaitable[T | None]], seconds: float, what: str) -> T:
    """Poll `probe` until it returns something truthy (and return that), or fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:g}s waiting for {what}")
        await asyncio.sleep(POLL)


@contextlib.asynccontextmanager
async def clients(cluster: ClusterInfo, count: int) -> AsyncIterator[list[KubeClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(KubeClient(load_access(cluster.kubeconfig))) for _ in range(count)]


@contextlib.asynccontextmanager
async def renewing(member: MemberLease) -> AsyncIterator[MemberLease]:
    """`member` renewing in the background (released when the block ends)."""
    stop = asyncio.Event()
    task = asyncio.create_task(member.run(stop, retry=0.05))
    try:
        await until(lambda: _valid(member), 10, f"{member.name} to be held")
        yield member
    finally:
        stop.set()
        await task


async def _valid(member: MemberLease) -> bool:
    return member.fence.valid()


def run(body: Coroutine[Any, Any, None]) -> None:
    asyncio.run(body)


def test_two_members_see_each_other_and_a_dead_one_goes_after_its_lease(
        cluster: ClusterInfo, namespace: str, kubectl: Kubectl) -> None:
    async def body() -> None:
        async with clients(cluster, 3) as (ka, kb, observer):
            a = MemberLease(ka, namespace, "stead-a", duration=2)
            # b's lease is long enough for the observer to see it live on a loaded machine (1 s was not)
            b = MemberLease(kb, namespace, "stead-b", duration=3)
            seen = Liveness(skew=SKEW)
            async with renewing(a):
                sent = time.monotonic()
                assert await b.renew()  # b renews once, then "dies" (kill -9: no release)
                live = await until(lambda: _members(observer, namespace, seen, 2), 5, "both members live")
                assert live == {"stead-a": a.incarnation, "stead-b": b.incarnation}
                # a keeps renewing (every 2/3 s) meanwhile
                gone = await until(lambda: _without(observer, namespace, seen, "stead-b"), 15, "stead-b to expire")
                assert time.monotonic() - sent >= 3  # never before its lease ran out
                assert gone == {"stead-a": a.incarnation}
                assert a.renewals >= 2
            assert await read_members(observer, namespace, seen) == {}  # released: gone at once
        out = kubectl("get", "leases", "-n", namespace, "-l", "app.kubernetes.io/name=stead,stead.dev/role=member",
                      "-o", "jsonpath={.items[*].metadata.name}").stdout
        assert sorted(out.split()) == ["stead-member-stead-a", "stead-member-stead-b"]

    run(body())


async def _members(kube: KubeClient, namespace: str, seen: Liveness, count: int) -> dict[str, str] | None:
    live = await read_members(kube, namespace, seen)
    return live if len(live) == count else None


async def _without(kube: KubeClient, namespace: str, seen: Liveness, member: str) -> dict[str, str] | None:
    live = await read_members(kube, namespace, seen)
    return live if member not in live else None


def test_of_two_concurrent_acquirers_exactly_one_wins_every_time(cluster: ClusterInfo, namespace: str) -> None:
    rounds = 25

    async def body() -> None:
        async with clients(cluster, 2) as (ka, kb):
            a = MemberLease(ka, namespace, "stead-a", duration=2)
            b = MemberLease(kb, namespace, "stead-b", duration=2)
            async with renewing(a), renewing(b):
                wins = {"stead-a": 0, "stead-b": 0}
                for i in range(rounds):
                    # a fresh project (both create) and, after a release, a free one (both replace)
                    for phase in ("create", "replace"):
                        project = f"contested-{i}"
                        ca, cb = await asyncio.gather(read_claim(ka, namespace, project),
                                                      read_claim(kb, namespace, project))
                        assert ca == cb and ca.free
                        got = await asyncio.gather(acquire(ka, namespace, ca, "stead-a", a.fence, {}),
                                                   acquire(kb, namespace, cb, "stead-b", b.fence, {}))
                        winners = [claim for claim in got if claim is not None]
                        assert len(winners) == 1, (project, phase, got)
                        winner = winners[0]
                        wins[winner.holder] += 1
                        assert await read_claim(ka, namespace, project) == winner
                        assert winner.epoch == (1 if phase == "create" else 2)
                        if phase == "create":
                            client = ka if winner.holder == "stead-a" else kb
                            assert await release(client, namespace, winner, winner.holder) is not None
                assert sum(wins.values()) == 2 * rounds
                claims = await list_claims(ka, namespace)
                assert len(claims) == rounds and all(c.epoch == 2 for c in claims.values())

    run(body())


def test_a_dead_holders_claim_is_taken_over_with_the_next_epoch(cluster: ClusterInfo, namespace: str) -> None:
    async def body() -> None:
        async with clients(cluster, 2) as (ka, kb):
            a = MemberLease(ka, namespace, "stead-a", duration=1)
            b = MemberLease(kb, namespace, "stead-b", duration=2)
            seen_by_b = Liveness(skew=SKEW)
            async with renewing(b):
                sent = time.monotonic()
                assert await a.renew()  # then never again: a dies holding its claim
                held = await acquire(ka, namespace, Claim("team-a"), "stead-a", a.fence, {})
                assert held is not None and held.epoch == 1
                live = await read_members(kb, namespace, seen_by_b)
                assert held.valid(live)
                assert await acquire(kb, namespace, held, "stead-b", b.fence, live) is None  # a is live

                async def take_over() -> Claim | None:
                    live = await read_members(kb, namespace, seen_by_b)
                    claim = await read_claim(kb, namespace, "team-a")
                    if claim.valid(live):
                        return None
                    return await acquire(kb, namespace, claim, "stead-b", b.fence, live)

                taken = await until(take_over, 10, "stead-b to take over team-a")
                assert time.monotonic() - sent >= 1  # not before a's lease ran out
                assert not a.fence.valid()  # and a had stopped writing before that
                assert (taken.holder, taken.incarnation, taken.epoch) == ("stead-b", b.incarnation, 2)
                with pytest.raises(FenceExpired):  # a wakes up: refused before sending anything
                    await acquire(ka, namespace, taken, "stead-a", a.fence, {})
                assert await release(ka, namespace, held, "stead-a") is None  # its old version: 409

    run(body())


def test_a_released_claim_is_acquired_by_another_member_at_once(cluster: ClusterInfo, namespace: str) -> None:
    async def body() -> None:
        async with clients(cluster, 2) as (ka, kb):
            a = MemberLease(ka, namespace, "stead-a", duration=2)
            b = MemberLease(kb, namespace, "stead-b", duration=2)
            seen_by_b = Liveness(skew=SKEW)
            async with renewing(a), renewing(b):
                held = await acquire(ka, namespace, Claim("team-b"), "stead-a", a.fence, {})
                assert held is not None
                freed = await release(ka, namespace, held, "stead-a")
                assert freed is not None and freed.free and freed.epoch == 1
                live = await read_members(kb, namespace, seen_by_b)
                assert "stead-a" in live  # a is alive: only the release lets b in
                claim = await read_claim(kb, namespace, "team-b")
                taken = await acquire(kb, namespace, claim, "stead-b", b.fence, live)
                assert taken is not None and (taken.holder, taken.epoch) == ("stead-b", 2)

    run(body())


def test_a_claim_is_collected_only_as_its_holder_read_it(cluster: ClusterInfo, namespace: str) -> None:
    """The real API server honours the DELETE's preconditions on a Lease: a claim that changed hands
    since it was read, or was deleted and created again (another uid), is never deleted."""
    async def body() -> None:
        async with clients(cluster, 2) as (ka, kb):
            a = MemberLease(ka, namespace, "stead-a", duration=2)
            b = MemberLease(kb, namespace, "stead-b", duration=2)
            async with renewing(a), renewing(b):
                held = await acquire(ka, namespace, Claim("gone"), "stead-a", a.fence, {})
                assert held is not None and held.uid
                freed = await release(ka, namespace, held, "stead-a")
                assert freed is not None
                taken = await acquire(kb, namespace, freed, "stead-b", b.fence, {"stead-a": a.incarnation or ""})
                assert taken is not None
                assert not await collect(ka, namespace, held, "stead-a")  # changed hands: 409, not deleted
                assert (await read_claim(ka, namespace, "gone")).holder == "stead-b"
                assert await collect(kb, namespace, taken, "stead-b")
                assert not (await read_claim(ka, namespace, "gone")).exists
                assert not await collect(kb, namespace, taken, "stead-b")  # already gone: 404
                again = await acquire(ka, namespace, Claim("gone"), "stead-a", a.fence, {})
                assert again is not None and again.epoch == 1 and again.uid != held.uid
                stale = Claim("gone", "stead-a", again.incarnation, 1, again.resource_version, uid=held.uid)
                assert not await collect(ka, namespace, stale, "stead-a")  # the old uid: refused
                assert (await read_claim(ka, namespace, "gone")).term == again.term

    run(body())


def test_the_fence_refuses_after_the_deadline_and_a_lapse_voids_old_claims(
        cluster: ClusterInfo, namespace: str) -> None:
    async def body() -> None:
        async with clients(cluster, 1) as (kube,):
            member = MemberLease(kube, namespace, "stead-a", duration=1)
            assert await member.renew()
            first = member.incarnation
            member.fence.check()
            held = await acquire(kube, namespace, Claim("team-c"), "stead-a", member.fence, {})
            assert held is not None
            await until(lambda: _closed(member), 5, "the fence's deadline")  # a pause past the lease
            with pytest.raises(FenceExpired):
                member.fence.check()
            before = dict(kube.requests)
            with pytest.raises(FenceExpired):
                await acquire(kube, namespace, Claim("team-d"), "stead-a", member.fence, {})
            assert kube.requests == before  # refused without a request
            # renewing after the lapse starts a new incarnation: the old claim is void, even for us
            assert await member.renew()
            assert member.incarnation not in (None, first)
            live = await read_members(kube, namespace, Liveness(skew=SKEW))
            claim = await read_claim(kube, namespace, "team-c")
            assert not claim.valid(live)
            again = await acquire(kube, namespace, claim, "stead-a", member.fence, live)
            assert again is not None and again.epoch == 2 and again.incarnation == member.incarnation

    run(body())


async def _closed(member: MemberLease) -> bool:
    return not member.fence.valid()


def test_three_replicas_split_100_projects_adopt_a_dead_ones_and_hand_over_on_stop(
        cluster: ClusterInfo, namespace: str) -> None:
    """Three `ShardMember`s (2 s leases) over 100 projects: each project owned by exactly one,
    checked every few milliseconds throughout; kill one (no release): its projects adopted
    within lease + skew + a pass; stop one cleanly: adopted at once; start a third again: it
    takes exactly what the ring gives it."""
    projects = [f"team-{i}" for i in range(100)]
    duration = 2  # 1 s leave too little room on a loaded 2-core machine: the fence closes, incarnations churn

    async def listing() -> list[str]:
        return projects

    async def body() -> None:
        async with clients(cluster, 4) as kubes:
            members: dict[str, ShardMember] = {}
            tasks: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
            violations: list[str] = []

            def start(name: str, kube: KubeClient) -> None:
                # stead-0 LISTs the claims every pass; the others read them from their watch (`ClaimCache`)
                cache = None if name == "stead-0" else ClaimCache.watching(kube, namespace)
                member = ShardMember(kube, namespace, name, listing, duration=duration, skew=SKEW, claims=cache)
                stop = asyncio.Event()
                members[name] = member
                tasks[name] = (asyncio.create_task(member.run(stop)), stop)

            def owners() -> dict[str, str]:
                acting: dict[str, str] = {}
                for name, member in members.items():
                    for project in member.owned():
                        if project in acting:
                            violations.append(f"{project}: {acting[project]} and {name}")
                        acting[project] = name
                return acting

            dead_projects: set[str] = set()
            first_adoption: list[float] = []

            async def watch() -> None:  # the invariant, sampled all along
                while True:
                    acting = owners()
                    if not first_adoption and any(acting.get(p, "stead-0") != "stead-0" for p in dead_projects):
                        first_adoption.append(datetime.now(UTC).timestamp())
                    await asyncio.sleep(0.005)

            async def settled(names: list[str]) -> dict[str, str] | None:
                acting = owners()
                expected = Ring(names).owners(projects)
                return acting if acting == expected else None

            watcher = asyncio.create_task(watch())
            try:
                for i in range(3):
                    start(f"stead-{i}", kubes[i])
                three = await until(lambda: settled(["stead-0", "stead-1", "stead-2"]), 20, "3 replicas to settle")
                assert set(three) == set(projects)

                dead = members["stead-0"]
                dead_projects.update(p for p, o in three.items() if o == "stead-0")
                killed = default_clock()
                task, _ = tasks.pop("stead-0")
                task.cancel()  # kill -9: no release, its Lease runs out
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                members.pop("stead-0")
                assert dead.owned() == {}
                last = await kubes[3].request("GET", leases_path(namespace, "stead-member-stead-0"))
                renewed = datetime.fromisoformat(last["spec"]["renewTime"]).timestamp()  # one machine: one wall clock
                lease_end = renewed + last["spec"]["leaseDurationSeconds"]
                two = await until(lambda: settled(["stead-1", "stead-2"]), 20, "adoption of stead-0's projects")
                adoption = default_clock() - killed
                assert first_adoption and first_adoption[0] >= lease_end  # nobody before its lease ran out
                assert adoption <= duration + 5  # the bound: lease + 5 s
                print(f"adopted {adoption:.2f}s after the kill, {first_adoption[0] - lease_end:.2f}s after its "
                      f"lease ended (lease {duration}s)")
                assert set(two) == set(projects)
                claims = await list_claims(kubes[3], namespace)
                assert min(claims[p].epoch for p, o in three.items() if o == "stead-0") >= 2

                start("stead-3", kubes[3])  # scale 2 -> 3
                again = await until(lambda: settled(["stead-1", "stead-2", "stead-3"]), 20, "scale-up to settle")
                moved = {p for p in projects if two[p] != again[p]}
                assert moved == {p for p in projects if again[p] == "stead-3"}  # only to the newcomer

                stopped = time.monotonic()
                task, stop = tasks.pop("stead-1")
                stop.set()  # SIGTERM: drain, release, release the membership
                await task
                members.pop("stead-1")
                assert "stead-1" not in await read_members(kubes[3], namespace, Liveness(skew=SKEW))  # released
                await until(lambda: settled(["stead-2", "stead-3"]), 10, "hand-over of stead-1's projects")
                handed = time.monotonic() - stopped
                assert handed < 5  # the bound for SIGTERM
                print(f"handed over {handed:.2f}s after the stop")
                assert not any(m.unowned for m in members.values())
                assert all(m.listed < m.passes / 2 for m in members.values()), {  # passes read the watch's cache
                    n: (m.listed, m.passes) for n, m in members.items()}
            finally:
                watcher.cancel()
                for _, stop in tasks.values():
                    stop.set()
                await asyncio.gather(*(t for t, _ in tasks.values()), return_exceptions=True)
            assert violations == []

    run(body())
