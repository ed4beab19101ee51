"""Member Leases: taking, renewing, releasing ours; judging others' liveness conservatively."""

from __future__ import annotations

from typing import Any

import pytest

from operators.runtime.kube.client import ApiError
from operators.runtime.shard import Liveness, MemberLease, leases_path, read_members
from operators.runtime.shard.leases import micro_time
from tests.unit.fakeapi import FakeApi
from tests.unit.shard.conftest import FakeTime, sync

NS = "stead-system"


def member(kube: Any, clock: FakeTime, replica: str = "stead-0", duration: int = 15, **kw: Any) -> MemberLease:
    ids = iter(f"{replica}-inc-{i}" for i in range(1, 100))
    return MemberLease(kube, NS, replica, duration=duration, clock=clock.mono, wall=clock.wall,
                       incarnations=lambda: next(ids), **kw)


def lease(kube: FakeApi, name: str) -> dict[str, Any]:
    return kube.objects[leases_path(NS, name)]


@sync
async def test_the_first_renewal_creates_the_lease_and_opens_the_fence(kube: FakeApi, clock: FakeTime) -> None:
    ours = member(kube, clock)
    assert await ours.renew()
    obj = lease(kube, "stead-member-stead-0")
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/name": "stead", "stead.dev/role": "member"}
    assert obj["metadata"]["annotations"] == {"stead.dev/incarnation": "stead-0-inc-1"}
    assert obj["spec"] == {"holderIdentity": "stead-0", "leaseDurationSeconds": 15, "leaseTransitions": 1,
                           "acquireTime": micro_time(clock.wall()), "renewTime": micro_time(clock.wall())}
    assert obj["spec"]["renewTime"].endswith(".000000Z")  # MicroTime, the form the API server takes
    assert ours.fence.deadline == clock.mono() + 15 - 3
    assert ours.renew_interval == 5
    assert ours.incarnation == "stead-0-inc-1"


@sync
async def test_renewals_continue_the_incarnation_with_conditional_writes(kube: FakeApi, clock: FakeTime) -> None:
    ours = member(kube, clock)
    await ours.renew()
    acquired = lease(kube, "stead-member-stead-0")["spec"]["acquireTime"]
    clock.advance(5)
    assert await ours.renew()
    obj = lease(kube, "stead-member-stead-0")
    assert obj["spec"]["acquireTime"] == acquired
    assert obj["spec"]["renewTime"] == micro_time(clock.wall())
    assert obj["spec"]["leaseTransitions"] == 1
    assert ours.incarnation == "stead-0-inc-1"
    assert ours.renewals == 2
    assert [r.body["metadata"].get("resourceVersion") for r in kube.received if r.method == "PUT"] == ["1"]


@sync
async def test_a_renewal_after_a_lapse_starts_a_new_incarnation(kube: FakeApi, clock: FakeTime) -> None:
    ours = member(kube, clock)
    await ours.renew()
    clock.advance(12.5)  # paused past the fence's deadline (15 - 3)
    assert ours.incarnation is None
    assert await ours.renew()
    assert ours.incarnation == "stead-0-inc-2"
    obj = lease(kube, "stead-member-stead-0")
    assert obj["spec"]["leaseTransitions"] == 2
    assert obj["metadata"]["annotations"]["stead.dev/incarnation"] == "stead-0-inc-2"


class SlowApi:
    """Answers after `delay` seconds of the fake clock (a renewal stuck in flight)."""

    def __init__(self, kube: FakeApi, clock: FakeTime) -> None:
        self.kube, self.clock, self.delay = kube, clock, 0.0

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        answer = await self.kube.request(method, path, body, content_type, params)
        self.clock.advance(self.delay)
        return answer


@sync
async def test_a_renewal_answered_too_late_is_followed_by_a_new_incarnation(kube: FakeApi, clock: FakeTime) -> None:
    api = SlowApi(kube, clock)
    ours = member(api, clock)
    await ours.renew()
    clock.advance(11)
    api.delay = 2  # answered at 13 > deadline 12
    assert not await ours.renew()
    assert ours.incarnation is None
    api.delay = 0
    assert await ours.renew()
    assert ours.incarnation == "stead-0-inc-2"


@sync
async def test_taking_over_our_lease_waits_for_an_earlier_live_holder(kube: FakeApi, clock: FakeTime) -> None:
    kube.add(leases_path(NS, "stead-member-stead-0"), {
        "metadata": {"labels": {"app.kubernetes.io/name": "stead", "stead.dev/role": "member"},
                     "annotations": {"stead.dev/incarnation": "old"}},
        "spec": {"holderIdentity": "stead-0", "leaseDurationSeconds": 15, "leaseTransitions": 4,
                 "renewTime": micro_time(clock.wall())},
    })
    ours = member(kube, clock)  # a restarted process: the old one may still be writing
    assert not await ours.renew()
    clock.advance(14.9)  # we saw its renewal fresh: it may write until 15 s after we saw it
    assert not await ours.renew()
    clock.advance(0.2)
    assert await ours.renew()
    obj = lease(kube, "stead-member-stead-0")
    assert obj["spec"]["leaseTransitions"] == 5
    assert obj["metadata"]["annotations"]["stead.dev/incarnation"] == "stead-0-inc-1"


@sync
async def test_a_released_lease_is_taken_at_once(kube: FakeApi, clock: FakeTime) -> None:
    first = member(kube, clock)
    await first.renew()
    await first.release()
    assert not first.fence.valid()
    assert "holderIdentity" not in lease(kube, "stead-member-stead-0")["spec"]
    second = member(kube, clock)
    assert await second.renew()


@sync
async def test_someone_else_writing_our_lease_closes_the_fence(kube: FakeApi, clock: FakeTime) -> None:
    ours = member(kube, clock)
    await ours.renew()
    await kube.request("PATCH", leases_path(NS, "stead-member-stead-0"), {"spec": {"holderIdentity": "intruder"}},
                       content_type="application/merge-patch+json")
    assert not await ours.renew()
    assert not ours.fence.valid()


@sync
async def test_a_renewal_whose_answer_was_lost_is_recognised_as_ours(kube: FakeApi, clock: FakeTime) -> None:
    """A timeout after the API server wrote our renewal: the next one meets 409 on our own write.
    That is no reason to give up the Lease (and wait a whole lease for a new incarnation)."""
    ours = member(kube, clock)
    await ours.renew()
    path = leases_path(NS, "stead-member-stead-0")
    await kube.request("PUT", path, {**lease(kube, "stead-member-stead-0")})  # the write whose answer was lost
    clock.advance(5)
    assert await ours.renew()  # 409, re-read: ours
    assert ours.incarnation == "stead-0-inc-1"
    clock.advance(5)
    assert await ours.renew()
    assert lease(kube, "stead-member-stead-0")["spec"]["renewTime"] == micro_time(clock.wall())
    assert ours.incarnation == "stead-0-inc-1"


@sync
async def test_an_outage_keeps_the_fence_until_its_deadline(kube: FakeApi, clock: FakeTime) -> None:
    ours = member(kube, clock)
    await ours.renew()
    kube.fail_with(ApiError(503, "etcd is away"))
    clock.advance(5)
    with pytest.raises(ApiError):
        await ours.renew()
    assert ours.fence.valid()
    clock.advance(7)
    assert not ours.fence.valid()


def test_a_lease_shorter_than_a_second_is_refused(kube: FakeApi, clock: FakeTime) -> None:
    with pytest.raises(ValueError):
        member(kube, clock, duration=0)


# --- judging others ------------------------------------------------------------------------------


@sync
async def test_members_are_listed_by_label_and_live_until_a_later_read_shows_them_expired(
        kube: FakeApi, clock: FakeTime) -> None:
    a, b = member(kube, clock, "stead-0"), member(kube, clock, "stead-1")
    await a.renew()
    await b.renew()
    kube.add(leases_path(NS, "someone-else"), {"spec": {"holderIdentity": "x", "renewTime": micro_time(clock.wall()),
                                                         "leaseDurationSeconds": 15}})
    seen = Liveness(clock.mono, clock.wall)
    assert await read_members(kube, NS, seen) == {"stead-0": "stead-0-inc-1", "stead-1": "stead-1-inc-1"}
    assert kube.received[-1].path.endswith("/leases")
    clock.advance(10)
    await a.renew()  # stead-1 stops renewing (killed)
    clock.advance(6.5)  # stead-1's renewal is 16.5 s old: past 15 s plus the 1 s of skew tolerated
    assert set(seen.live()) == {"stead-0", "stead-1"}  # nothing read since: not confirmed dead
    assert await read_members(kube, NS, seen) == {"stead-0": "stead-0-inc-1"}


@sync
async def test_a_release_is_seen_at_once(kube: FakeApi, clock: FakeTime) -> None:
    a = member(kube, clock)
    await a.renew()
    seen = Liveness(clock.mono, clock.wall)
    assert await read_members(kube, NS, seen) == {"stead-0": "stead-0-inc-1"}
    await a.release()
    assert await read_members(kube, NS, seen) == {}


@sync
async def test_a_stale_lease_seen_for_the_first_time_is_dead_at_once(kube: FakeApi, clock: FakeTime) -> None:
    a = member(kube, clock)
    await a.renew()
    clock.advance(60)
    assert await read_members(kube, NS, Liveness(clock.mono, clock.wall)) == {}


@sync
async def test_a_holder_whose_clock_is_behind_is_not_declared_dead_early(kube: FakeApi, clock: FakeTime) -> None:
    """Its renewTime looks 0.8 s old when written; within the skew tolerated, the lease still
    counts from when we first saw it, so it lives its whole duration on our clock."""
    behind = clock.skewed(-0.8)
    a = MemberLease(kube, NS, "stead-0", duration=15, clock=behind.mono, wall=behind.wall)
    await a.renew()
    seen = Liveness(clock.mono, clock.wall, skew=1.0)
    await read_members(kube, NS, seen)
    clock.advance(14.9)
    assert "stead-0" in await read_members(kube, NS, seen)
    clock.advance(0.2)
    assert "stead-0" not in await read_members(kube, NS, seen)


@sync
async def test_a_deleted_lease_counts_as_unrenewed_not_as_gone(kube: FakeApi, clock: FakeTime) -> None:
    """Its holder's fence may still be open: dead only once its last renewal has run out."""
    a = member(kube, clock)
    await a.renew()
    seen = Liveness(clock.mono, clock.wall)
    await read_members(kube, NS, seen)
    del kube.objects[leases_path(NS, "stead-member-stead-0")]
    assert "stead-0" in await read_members(kube, NS, seen)
    clock.advance(15.1)
    assert await read_members(kube, NS, seen) == {}
    assert seen.expires_in("stead-0") is None  # forgotten
