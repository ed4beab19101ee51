"""Membership: each replica holds a Lease `stead-member-<replica>`; who is live is judged from them.

Layout of a member Lease (in the operator's namespace):

    metadata.name          stead-member-<replica id>
    metadata.labels        app.kubernetes.io/name=stead, stead.dev/role=member
    metadata.annotations   stead.dev/incarnation: <random id of this term of the replica>
    spec.holderIdentity    <replica id>; absent once released (clean shutdown)
    spec.leaseDurationSeconds, spec.renewTime (renewed every duration/3),
    spec.acquireTime, spec.leaseTransitions: when the incarnation began, and how many there were

Why an incarnation: a claim names the incarnation it was taken under, and is valid only while
that incarnation's Lease is live. A replica that restarts, or whose fence lapsed (paused past its
lease), comes back as a new incarnation, so its old claims are void for everybody, itself
included: it re-acquires them (a new epoch) and rebuilds, never trusting what it held before.

Why liveness is judged on our own clock: renewTime is written by the holder's wall clock, and
wall clocks disagree. `Liveness` records, on the local monotonic clock, when it first saw each
version of a Lease, subtracts how old the renewal already was (by wall clocks, minus the skew
it tolerates, so never more than its true age), and declares the holder dead only when a read
*sent after* that expiry still shows the same version. A holder that renewed at any time before
such a read is seen renewed; one that renews after it had already lapsed (its fence closed at
its own, earlier, deadline) comes back as a new incarnation. So the fence of a holder always
closes before anyone can take its claims, given clock skew below `skew` and clock rates that
differ by less than the fence's margin over one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from operators.runtime.kube.client import ApiError, Requester
from operators.runtime.shard.fence import Clock, Fence, default_clock
from operators.runtime.shard.leases import (
    create_lease,
    get_lease,
    lease_body,
    list_leases,
    meta_of,
    micro_time,
    parse_time,
    replace_lease,
    spec_of,
    wall_now,
)

log = logging.getLogger(__name__)

MEMBER_ROLE = "member"
MEMBER_PREFIX = "stead-member-"
INCARNATION_ANNOTATION = "stead.dev/incarnation"
DEFAULT_DURATION = 15
"""Seconds; Kubernetes' own default for leader election. Adoption after a kill -9 takes at most
duration + skew + one poll of the coordinator (within the issue's lease + 5 s)."""
DEFAULT_SKEW = 1.0
"""Seconds of wall-clock disagreement between replicas tolerated when judging others (NTP keeps
nodes within milliseconds; a larger skew only delays adoption, a smaller one risks it early)."""


def member_lease_name(replica: str) -> str:
    return f"{MEMBER_PREFIX}{replica}"


def new_incarnation() -> str:
    return uuid.uuid4().hex[:16]


def default_margin(duration: float) -> float:
    """How long before the lease's end our fence closes: a fifth of the lease (3 s of 15 s),
    room for a write in flight after the check and for clock-rate differences."""
    return duration / 5


@dataclass(frozen=True)
class MemberRecord:
    """One member Lease as read."""

    name: str
    identity: str
    """holderIdentity; empty when released."""
    incarnation: str
    renew_time: datetime | None
    duration: float
    resource_version: str
    transitions: int

    @classmethod
    def from_lease(cls, obj: Mapping[str, Any]) -> MemberRecord:
        meta, spec = meta_of(obj), spec_of(obj)
        return cls(
            name=str(meta.get("name") or ""), identity=str(spec.get("holderIdentity") or ""),
            incarnation=str((meta.get("annotations") or {}).get(INCARNATION_ANNOTATION) or ""),
            renew_time=parse_time(spec.get("renewTime")),
            duration=float(spec.get("leaseDurationSeconds") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


@dataclass
class _Seen:
    record: MemberRecord
    expires: float  # local clock: the latest moment the renewal seen could still be in force
    read_at: float  # local clock: when the latest read that still showed this version was sent


class Liveness:
    """Which members are live, from successive reads of their Leases (see the module's docstring)."""

    def __init__(self, clock: Clock = default_clock, wall: Callable[[], datetime] = wall_now,
                 skew: float = DEFAULT_SKEW) -> None:
        self._clock = clock
        self._wall = wall
        self.skew = skew
        self._seen: dict[str, _Seen] = {}

    @property
    def clock(self) -> Clock:
        return self._clock

    def observe(self, leases: Iterable[Mapping[str, Any]], sent_at: float, complete: bool = True) -> None:
        """Record a read of member Leases whose request was sent at `sent_at` (local clock).

        `complete`: the read was a listing of all of them, so a Lease missing from it is gone. A
        gone Lease is treated as one never renewed again (its holder cannot renew it without
        seeing 404): dead once its last version expires, not at once, since the holder's fence
        may still be open.
        """
        now, wall = self._clock(), self._wall()
        listed: set[str] = set()
        for obj in leases:
            record = MemberRecord.from_lease(obj)
            listed.add(record.name)
            seen = self._seen.get(record.name)
            if seen is None or seen.record.resource_version != record.resource_version:
                self._seen[record.name] = _Seen(record, self._expiry(record, now, wall), sent_at)
            else:
                seen.read_at = max(seen.read_at, sent_at)
        if complete:
            for name in [n for n in self._seen if n not in listed]:
                seen = self._seen[name]
                seen.read_at = max(seen.read_at, sent_at)
                if seen.expires <= seen.read_at:
                    del self._seen[name]

    def _expiry(self, record: MemberRecord, now: float, wall: datetime) -> float:
        if record.renew_time is None or record.duration <= 0:
            return -math.inf
        age = max(0.0, (wall - record.renew_time).total_seconds() - self.skew)  # never more than its true age
        return now + record.duration - age

    def live(self) -> dict[str, str]:
        """Live members: replica id -> incarnation. Live means held (not released) and not yet
        confirmed expired by a read sent after its expiry."""
        members: dict[str, str] = {}
        for seen in self._seen.values():
            if seen.record.identity and seen.expires > seen.read_at:
                members[seen.record.identity] = seen.record.incarnation
        return members

    def is_live(self, identity: str, incarnation: str) -> bool:
        return bool(identity) and self.live().get(identity) == incarnation

    def expires_in(self, identity: str) -> float | None:
        """Seconds (local clock) until `identity`'s latest seen renewal runs out; None if unknown."""
        for seen in self._seen.values():
            if seen.record.identity == identity:
                return seen.expires - self._clock()
        return None


async def read_members(api: Requester, namespace: str, liveness: Liveness) -> dict[str, str]:
    """List the member Leases (one LIST, filtered by label on the API server), record the read,
    and return the live members (replica id -> incarnation)."""
    sent = liveness.clock()
    liveness.observe(await list_leases(api, namespace, MEMBER_ROLE), sent)
    return liveness.live()


class MemberLease:
    """Our own member Lease: taken at start, renewed every duration/3, released at shutdown.

    `fence` is open while the Lease is ours and fresh; every write for an owned project checks it.
    """

    def __init__(
        self, api: Requester, namespace: str, replica: str, *, duration: int = DEFAULT_DURATION,
        margin: float | None = None, clock: Clock = default_clock, wall: Callable[[], datetime] = wall_now,
        skew: float = DEFAULT_SKEW, incarnations: Callable[[], str] = new_incarnation,
    ) -> None:
        if duration < 1:
            raise ValueError("leaseDurationSeconds is a whole number of seconds, at least 1")
        self.api = api
        self.namespace = namespace
        self.replica = replica
        self.name = member_lease_name(replica)
        self.duration = duration
        self.margin = default_margin(duration) if margin is None else margin
        if not 0 <= self.margin < duration:
            raise ValueError("the fence's margin must be shorter than the lease")
        self.renew_interval = duration / 3
        self._clock = clock
        self._wall = wall
        self._incarnations = incarnations
        self._previous = Liveness(clock, wall, skew)  # judges a Lease of ours left by an earlier process
        self.fence = Fence(clock)
        self._held: MemberRecord | None = None  # the version we wrote last, while we hold it
        self._acquire_time: str | None = None  # when the current incarnation began
        self.renewals = 0  # writes, for the write-cost figures

    @property
    def incarnation(self) -> str | None:
        return self.fence.incarnation if self.fence.valid() else None

    async def renew(self) -> bool:
        """One renewal (or the first acquisition). Returns whether the fence is open afterwards.

        Taking the Lease over from an earlier process of ours (a crash, a duplicate replica id)
        waits until that one is released or dead, exactly as taking a claim would: our new
        incarnation voids its claims the moment it is written.
        """
        base = self._held
        if base is None:
            base = await self._read_for_takeover()
            if base is None:
                return False
        continuing = self._held is not None and self.fence.valid() and base.incarnation == self.fence.incarnation
        incarnation = base.incarnation if continuing else self._incarnations()
        sent, now = self._clock(), self._wall()
        spec = {
            "holderIdentity": self.replica, "leaseDurationSeconds": self.duration,
            "acquireTime": self._acquire_time if continuing else micro_time(now), "renewTime": micro_time(now),
            "leaseTransitions": base.transitions + (0 if continuing else 1),
        }
        body = lease_body(self.namespace, self.name, MEMBER_ROLE, spec,
                          annotations={INCARNATION_ANNOTATION: incarnation},
                          resource_version=base.resource_version or None)
        try:
            answer = await (replace_lease(self.api, body) if base.resource_version else create_lease(self.api, body))
        except ApiError as error:
            if error.status == 409 and continuing and await self._landed(incarnation):
                return self.fence.valid()
            if error.status in (404, 409):  # deleted, or written by someone else: not ours any more
                log.warning("member lease %s lost (%s): fence closed", self.name, error)
                self._held = None
                self.fence.close()
                return False
            raise  # an outage: the fence stays open until its deadline, the caller retries sooner
        self.renewals += 1
        self._held = MemberRecord.from_lease(answer)
        self._acquire_time = str(spec["acquireTime"])
        opened = self.fence.extend(incarnation, sent, self._clock(), self.duration, self.margin)
        if not opened and continuing:
            # Answered after our deadline: others may have judged us dead meanwhile. Start a new
            # incarnation on the next renewal (the caller retries at once).
            log.warning("member lease %s renewed too late: starting a new incarnation", self.name)
        return opened

    async def _landed(self, incarnation: str) -> bool:
        """After a 409 on a renewal: whether the Lease is still ours, changed by a renewal of ours
        whose answer was lost (a timeout after the API server had written it). Then it becomes the
        base of the next renewal, and the fence keeps its deadline: that write was sent after the
        renewal the deadline counts from, so the deadline is still a safe one."""
        try:
            current = MemberRecord.from_lease(await get_lease(self.api, self.namespace, self.name))
        except ApiError:
            return False
        if current.identity != self.replica or current.incarnation != incarnation:
            return False
        self._held = current
        return True

    async def _read_for_takeover(self) -> MemberRecord | None:
        """The Lease to write over (an empty record when there is none), or None while an earlier
        holder may still be live."""
        sent = self._clock()
        try:
            obj = await get_lease(self.api, self.namespace, self.name)
        except ApiError as error:
            if error.status == 404:
                return MemberRecord(self.name, "", "", None, 0, "", 0)
            raise
        self._previous.observe([obj], sent, complete=False)
        record = MemberRecord.from_lease(obj)
        if record.identity and self._previous.is_live(record.identity, record.incarnation):
            return None
        return record

    async def release(self) -> None:
        """Close the fence, then clear holderIdentity (others adopt our projects at once instead of
        after the lease). The fence closes first: nothing of ours is written after others may act."""
        self.fence.close()
        held, self._held = self._held, None
        if held is None:
            return
        spec = {"leaseDurationSeconds": self.duration, "leaseTransitions": held.transitions,
                "renewTime": micro_time(self._wall())}
        body = lease_body(self.namespace, self.name, MEMBER_ROLE, spec,
                          annotations={INCARNATION_ANNOTATION: held.incarnation},
                          resource_version=held.resource_version)
        try:
            await replace_lease(self.api, body)
        except ApiError as error:  # it expires by itself anyway
            log.info("member lease %s not released (%s); it expires in %ss", self.name, error, self.duration)

    async def run(self, stop: asyncio.Event, retry: float = 0.5) -> None:
        """Renew every duration/3 until `stop` is set, then release. A failed renewal is retried
        after `retry` seconds (an outage: the fence closes by itself at its deadline).

        Cancelled instead of stopped, it closes the fence and writes nothing more: the Lease runs
        out by itself, as after a crash (a cancelled task cannot be trusted to finish a write).
        """
        try:
            while not stop.is_set():
                started = self._clock()
                try:
                    opened = await self.renew()
                except ApiError as error:
                    log.info("member lease %s not renewed: %s", self.name, error)
                    opened = False
                if opened:  # every duration/3 from one send to the next, however long the answer took
                    wait = max(0.0, started + self.renew_interval - self._clock())
                elif self._held is not None:
                    wait = 0.0  # renewed too late: a new incarnation now
                else:
                    wait = min(retry, self.renew_interval)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
        except asyncio.CancelledError:
            self.fence.close()
            raise
        await self.release()
