"""The coordinator: from what a replica sees (live members, claims, projects) to what it does.

`decide` is pure: the same view always gives the same decision, so every rule is unit-tested
without a cluster. `execute` carries a decision out against the API server.

The rules, for each project (the ring built over the live members):
- a claim we hold under our current incarnation: keep it, unless the ring names another live
  member, then release it (after the project's work is drained: `execute` awaits `drain`);
- a claim a live member holds under its current incarnation: not ours, nothing to do;
- a free claim, or one whose holder is dead or of a past incarnation (ours included), or no
  claim yet: acquire it if the ring names us, else leave it for the member the ring names;
- a claim we hold whose project has had no objects for at least the lease duration
  (`view.vacant`, from `Vacancy`): delete it (drained first, then a DELETE conditional on the
  claim's uid and resourceVersion: `claims.collect`), whatever the ring says. A free or dead
  holder's claim of an empty project is acquired as any other, then collected by its new holder:
  one rule, "the holder collects", and never a delete of a claim someone else may hold.

Why it is safe with views that disagree: acquisition is a compare-and-swap on the claim
(`claims.acquire`), so two replicas whose rings both say "mine" cannot both win; the loser's
write is refused with 409 and it does nothing for that project. Why nobody abstains for
long: every replica reads the same member Leases, so views converge within one pass after a
change; a project still unowned after the lease duration is reported by `Sweep` (a metric and
an Event, once wired).

With our fence closed (our membership may have lapsed) the decision is empty: a replica that
may be dead neither takes nor keeps anything, and `owned` is empty so its handlers stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from operators.runtime.kube.client import Requester
from operators.runtime.shard.claims import Claim, ClaimCache, acquire, collect, release
from operators.runtime.shard.fence import Clock, Fence, FenceExpired, default_clock
from operators.runtime.shard.leases import wall_now
from operators.runtime.shard.ring import DEFAULT_VNODES, Placement, Ring


@dataclass(frozen=True)
class View:
    """What one replica knows at one moment."""

    me: str
    incarnation: str | None
    """Our membership incarnation while our fence is open, else None."""
    live: Mapping[str, str]
    """Live members: replica id -> incarnation (`membership.Liveness.live`)."""
    claims: Mapping[str, Claim]
    """Claims by project (`claims.ClaimCache.claims`, or `claims.list_claims`)."""
    projects: Collection[str] = ()
    """Every project that exists (from the objects listed); claimed projects count anyway."""
    vacant: Collection[str] = ()
    """Projects we hold that have had no objects for at least the lease duration (`Vacancy`)."""


@dataclass(frozen=True)
class Decision:
    acquire: tuple[Claim, ...] = ()
    """Claims to take, as read (the base of the compare-and-swap)."""
    release: tuple[Claim, ...] = ()
    """Claims of ours to give up once the project is drained."""
    keep: frozenset[str] = frozenset()
    """Projects we validly hold and keep."""
    waiting: frozenset[str] = frozenset()
    """Free projects (or with a dead holder) the ring gives to another live member."""
    ring: Placement = field(default_factory=lambda: Ring(()))
    collect: tuple[Claim, ...] = ()
    """Claims of ours whose project is gone: deleted (compare-and-swap) once drained."""


def ring_members(view: View) -> set[str]:
    """The ring is over the live members, us included only while our fence is open."""
    members = set(view.live)
    if view.incarnation is None:
        members.discard(view.me)
    else:
        members.add(view.me)
    return members


def decide(view: View, vnodes: int = DEFAULT_VNODES, ring: Placement | None = None,
           placement: Callable[[str], str] | None = None,
           layout: Callable[[Iterable[str]], Placement] | None = None) -> Decision:
    """What `view.me` should do now (see the module's docstring). `ring`: a prebuilt ring over
    `ring_members(view)`, to spare rebuilding it on every pass. `placement`: the key the ring
    places a project by (default: its name; `ring.by_bucket()` to keep buckets whole). `layout`:
    builds the ring over the members (default `Ring(members, vnodes)`; `ring.layout("bounded")`
    for bounded loads); it must depend on nothing but the members, so that every replica that
    sees the same members computes the same owners."""
    members = ring_members(view)
    if ring is None or ring.members != members:
        ring = layout(members) if layout is not None else Ring(members, vnodes)
    if view.incarnation is None:
        return Decision(ring=ring)
    to_acquire: list[Claim] = []
    to_release: list[Claim] = []
    to_collect: list[Claim] = []
    keep: set[str] = set()
    waiting: set[str] = set()
    for project in sorted(set(view.projects) | set(view.claims)):
        claim = view.claims.get(project) or Claim(project)
        should = ring.owner(placement(project) if placement is not None else project)
        if claim.held_by(view.me, view.incarnation):
            if project in view.vacant and project not in view.projects:
                to_collect.append(claim)
            elif should is not None and should != view.me:
                to_release.append(claim)
            else:
                keep.add(project)
        elif claim.valid(view.live):
            continue
        elif should == view.me:
            to_acquire.append(claim)
        else:
            waiting.add(project)
    return Decision(tuple(to_acquire), tuple(to_release), frozenset(keep), frozenset(waiting), ring,
                    tuple(to_collect))


def owned(view: View) -> frozenset[str]:
    """The projects `view.me` may act on now: claims held under our open incarnation."""
    if view.incarnation is None:
        return frozenset()
    return frozenset(p for p, c in view.claims.items() if c.held_by(view.me, view.incarnation))


@dataclass(frozen=True)
class Outcome:
    acquired: tuple[Claim, ...] = ()
    lost: tuple[str, ...] = ()
    """Projects whose acquisition another replica's write beat (or whose holder is live after all)."""
    released: tuple[Claim, ...] = ()
    collected: tuple[str, ...] = ()
    """Projects whose claim we deleted (those whose claim changed meanwhile are not in it)."""


async def execute(
    api: Requester, namespace: str, view: View, decision: Decision, fence: Fence, *,
    drain: Callable[[str], Awaitable[None]] | None = None, wall: Callable[[], datetime] = wall_now,
    concurrency: int = 8, written: ClaimCache | None = None,
) -> Outcome:
    """Carry out `decision`: drain then release or delete (collect), and acquire by compare-and-swap.

    `drain(project)` must return once nothing of ours for the project runs or will be written
    (stop taking its events, let running work reach a safe point, write what cannot be rebuilt).
    Acquisitions stop at the first `FenceExpired`: a replica whose lease may have lapsed takes
    nothing more. At most `concurrency` writes are in flight. `written`: the cache the next pass reads
    the claims from, told of each write as it is answered (so even when a later one raises).
    """
    limit = asyncio.Semaphore(concurrency)

    async def give_up(claim: Claim) -> Claim | None:
        if drain is not None:
            await drain(claim.project)
        async with limit:
            freed = await release(api, namespace, claim, view.me, wall)
        if freed is not None and written is not None:
            written.wrote(freed)
        return freed

    async def delete(claim: Claim) -> bool:
        if drain is not None:
            await drain(claim.project)
        async with limit:
            done = await collect(api, namespace, claim, view.me)
        if done and written is not None:
            written.deleted(claim)
        return done

    async def take(claim: Claim) -> Claim | None:
        async with limit:
            taken = await acquire(api, namespace, claim, view.me, fence, view.live, wall)
        if taken is not None and written is not None:
            written.wrote(taken)
        return taken

    freed = await asyncio.gather(*(give_up(c) for c in decision.release))
    deleted = await asyncio.gather(*(delete(c) for c in decision.collect))
    acquired: list[Claim] = []
    lost: list[str] = []
    results = await asyncio.gather(*(take(c) for c in decision.acquire), return_exceptions=True)
    for claim, result in zip(decision.acquire, results, strict=True):
        if isinstance(result, Claim):
            acquired.append(result)
        elif result is None or isinstance(result, FenceExpired):
            lost.append(claim.project)
        else:
            raise result
    return Outcome(tuple(acquired), tuple(lost), tuple(c for c in freed if c is not None),
                   tuple(c.project for c, done in zip(decision.collect, deleted, strict=True) if done))


class Lasting:
    """How long each member of a set, observed pass after pass, has been in it without a break (on
    the monotonic `clock`): a member that leaves the set starts again from 0 when it comes back."""

    def __init__(self, clock: Clock = default_clock) -> None:
        self._clock = clock
        self._since: dict[str, float] = {}

    def observe(self, members: Iterable[str]) -> dict[str, float]:
        """Record the set as it is now; return each member's seconds in it so far."""
        now = self._clock()
        self._since = {m: self._since.get(m, now) for m in members}
        return {m: now - since for m, since in self._since.items()}

    def of(self, member: str) -> float | None:
        """Seconds `member` has been in the set (None: not in it at the last observation)."""
        since = self._since.get(member)
        return None if since is None else self._clock() - since


class Sweep:
    """Finds projects without a valid owner for longer than `grace` (the lease duration).

    A project is unowned while no live member holds its claim under its current incarnation.
    A short gap is normal (a hand-over, a holder's death until its lease runs out); a long one
    means the replicas abstain (views that disagree for long, a broken replica that keeps its
    membership but never acquires) and is worth a metric and an Event.
    """

    def __init__(self, grace: float, clock: Clock = default_clock) -> None:
        self.grace = grace
        self._unowned = Lasting(clock)

    def update(self, projects: Iterable[str], claims: Mapping[str, Claim], live: Mapping[str, str]) -> list[str]:
        """Record one observation; return the projects unowned for longer than `grace`, sorted."""
        lasted = self._unowned.observe(p for p in projects if not (claims.get(p) or Claim(p)).valid(live))
        return sorted(p for p, seconds in lasted.items() if seconds > self.grace)

    def unowned_for(self, project: str) -> float | None:
        return self._unowned.of(project)


class Vacancy:
    """Finds the projects we hold that have had no objects for at least `grace` (the lease
    duration): their claims are collected (`View.vacant`).

    Observations are of projects held and *ready* (listed at acquisition, so that "no objects"
    is known, not merely not yet seen). The clock starts when a held project is first seen
    without objects, never earlier than its acquisition: a project just created (its first
    object not yet seen by everyone) or just moved to us is never collected, and a project
    whose objects come back before `grace` is kept and its clock starts again next time.
    """

    def __init__(self, grace: float, clock: Clock = default_clock) -> None:
        self.grace = grace
        self._empty = Lasting(clock)

    def update(self, held: Iterable[str], projects: Collection[str]) -> list[str]:
        """Record one observation (`held`: projects we hold, ready; `projects`: those with objects);
        return the held projects without objects for at least `grace`, sorted."""
        lasted = self._empty.observe(p for p in held if p not in projects)
        return sorted(p for p, seconds in lasted.items() if seconds >= self.grace)

    def empty_for(self, project: str) -> float | None:
        return self._empty.of(project)
