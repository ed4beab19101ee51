"""One replica's share of the work, running: its membership Lease and the coordinator's passes.

`ShardMember` ties the pieces together so that the reconciler (once wired) needs only three
things from it: `owns(project)` before acting on an event, `fence.check()` before each write,
and the hooks `drain` (a project is leaving, or was lost while we lapsed: stop and settle its
work), `on_acquired` (a project arrived at a new epoch: list it and rebuild what the store
needs; `owns()` is still False meanwhile) and `on_ready` (the project is ours from now on:
start on what was listed). `stead operator --sharding leases` wires it into the operator
(`operators.runtime.process`).

Each pass (every `interval`, default min(duration/3, 2 s)): read the member Leases (one
label-selected LIST), read the claims (from `claims`, the `ClaimCache` one WATCH keeps; a LIST
when there is none or it is not in sync), decide, carry the decision out, sweep. So a dead replica's
projects are adopted within duration + skew + interval of its last renewal (15 + 1 + 2 s by
default, within the issue's lease + 5 s). A claim of ours whose project has had no objects for a
lease (`Vacancy`) is drained and deleted (`claims.collect`), counted in `collected` and through
`count` (the operator's `stead_shard_claims_collected_total`).

Requests per pass, with `claims` in sync: one LIST of the member Leases (one item per replica),
and writes only for the claims that change hands (`execute`); none grows with the number of
projects. Without a watch, every pass LISTed every claim (~600 B each): 30 LISTs a minute of
10,000 claims at 10,000 projects (`bench/scale_out.py --claims` measures both).

Stopping: `stop` set is a hand-over (drain and release every project, then the membership),
so the others adopt at their next pass; cancellation is a crash (the fence closes, nothing is
written, the Lease runs out by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from datetime import datetime

from operators.runtime.kube.client import ApiError, Requester
from operators.runtime.shard.claims import Claim, ClaimCache, list_claims, release
from operators.runtime.shard.coordinator import Outcome, Sweep, Vacancy, View, decide, execute
from operators.runtime.shard.fence import Clock, Fence, default_clock
from operators.runtime.shard.leases import wall_now
from operators.runtime.shard.membership import (
    DEFAULT_DURATION,
    DEFAULT_SKEW,
    Liveness,
    MemberLease,
    new_incarnation,
    read_members,
)
from operators.runtime.shard.ring import DEFAULT_VNODES, Placement

log = logging.getLogger(__name__)

ProjectHook = Callable[[str], Awaitable[None]]
COLLECTED_METRIC = "stead_shard_claims_collected_total"
"""The counter `count` is called with for every claim deleted because its project is gone."""


class ShardMember:
    """One replica: holds its membership, takes and gives up project claims, answers `owns`."""

    def __init__(
        self, api: Requester, namespace: str, replica: str, projects: Callable[[], Awaitable[Collection[str]]], *,
        duration: int = DEFAULT_DURATION, interval: float | None = None, skew: float = DEFAULT_SKEW,
        margin: float | None = None, vnodes: int = DEFAULT_VNODES, drain: ProjectHook | None = None,
        on_acquired: Callable[[Claim], Awaitable[None]] | None = None, clock: Clock = default_clock,
        wall: Callable[[], datetime] = wall_now, incarnations: Callable[[], str] = new_incarnation,
        placement: Callable[[str], str] | None = None, on_ready: ProjectHook | None = None,
        on_pass: Callable[[], Awaitable[None]] | None = None, count: Callable[[str, float], None] | None = None,
        layout: Callable[[Iterable[str]], Placement] | None = None,
        claims: ClaimCache | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.replica = replica
        self.member = MemberLease(api, namespace, replica, duration=duration, margin=margin, clock=clock,
                                  wall=wall, skew=skew, incarnations=incarnations)
        self.liveness = Liveness(clock, wall, skew)
        self.sweep = Sweep(grace=duration, clock=clock)
        self.vacancy = Vacancy(grace=duration, clock=clock)
        self.interval = interval if interval is not None else min(duration / 3, 2.0)
        self.vnodes = vnodes
        self.placement = placement
        self.layout = layout
        """Builds the ring over the live members (`shard.ring.layout`; default the plain `Ring`)."""
        self.unowned: list[str] = []
        """Projects without a valid owner for longer than the lease, as of the last pass."""
        self.passes = 0
        self.collected = 0
        """Claims deleted because their project had no objects left (see `Vacancy`)."""
        self.claims = claims
        """Where passes read the claims (its watch runs with `run`); None: a LIST every pass."""
        self.listed = 0
        """Passes that LISTed the claims (no cache, or not in sync)."""
        self._unsure = False
        self._count = count
        self._projects = projects
        self._drain = drain
        self._on_acquired = on_acquired
        self._on_ready = on_ready
        self._on_pass = on_pass
        self._wall = wall
        self._ring: Placement | None = None
        self._held: dict[str, Claim] = {}
        self.claimed: frozenset[str] = frozenset()
        """The projects whose claim the API server said we hold at the last pass (ready or not)."""

    @property
    def fence(self) -> Fence:
        return self.member.fence

    @property
    def ring(self) -> Placement | None:
        """The ring of the last pass (over the live members; None before the first)."""
        return self._ring

    def owns(self, project: str) -> bool:
        """Whether we may act on `project` now: we hold its claim under our open incarnation."""
        claim = self._held.get(project)
        return claim is not None and self.fence.valid() and claim.incarnation == self.fence.incarnation

    def owned(self) -> dict[str, int]:
        """The projects we may act on now, with the epoch each was acquired at."""
        if not self.fence.valid():
            return {}
        return {p: c.epoch for p, c in self._held.items() if c.incarnation == self.fence.incarnation}

    async def step(self) -> Outcome:
        """One pass of the coordinator."""
        live = await read_members(self.api, self.namespace, self.liveness)
        claims = await self._read_claims()
        projects = await self._projects()
        incarnation = self.member.incarnation
        # What the API server says we hold (a claim taken over while we lapsed is gone from here),
        # and of that what is ready: rebuilt at the term (uid, epoch) the claim has now.
        ours = {p: c for p, c in claims.items() if c.held_by(self.replica, incarnation)}
        before = self._held
        self._held = {p: c for p, c in ours.items() if p in before and before[p].term == c.term}
        # Lost without a hand-over (taken over while we lapsed, a past incarnation's): owns() is
        # already False for them; drain what may still run (a paused process, woken up).
        lost = sorted(set(before) - set(self._held))
        if lost and self._drain is not None:
            await asyncio.gather(*(self._drain(project) for project in lost))
        vacant = self.vacancy.update(self._held, projects)  # only ready projects: their listing was read
        view = View(self.replica, incarnation, live, claims, projects, vacant)
        decision = decide(view, self.vnodes, self._ring, self.placement, self.layout)
        self._ring = decision.ring
        try:
            outcome = await execute(self.api, self.namespace, view, decision, self.fence, drain=self._let_go,
                                    wall=self._wall, written=self.claims)
        except BaseException:
            self._unsure = True  # a write may have landed unanswered: the next pass LISTs the claims
            raise
        if outcome.collected:
            self.collected += len(outcome.collected)
            if self._count is not None:
                self._count(COLLECTED_METRIC, float(len(outcome.collected)))
            log.info("%s: claims of %d projects without objects deleted: %s", self.replica,
                     len(outcome.collected), ", ".join(outcome.collected[:20]))
        gone = {c.project for c in (*decision.release, *decision.collect)}
        unready = [c for p, c in ours.items() if p not in self._held and p not in gone]
        for claim in (*unready, *outcome.acquired):
            await self._adopt(claim)
        self.claimed = frozenset({*ours, *(c.project for c in outcome.acquired)} - gone)
        if self._on_pass is not None:  # e.g. what the watches select follows the ring and the claims
            await self._on_pass()
        current = {**claims, **{c.project: c for c in (*outcome.acquired, *outcome.released)}}
        for project in outcome.collected:
            current.pop(project, None)
        self.unowned = self.sweep.update(set(projects) | set(current), current, live)
        if self.unowned:
            log.warning("projects without an owner for over %ss: %s", self.sweep.grace, ", ".join(self.unowned[:20]))
        self.passes += 1
        return outcome

    async def _read_claims(self) -> dict[str, Claim]:
        """The claims from the cache when it is in sync, else (and after a pass that failed while
        writing) from a LIST, which the cache then holds in front of its watch."""
        if self.claims is not None and self.claims.in_sync and not self._unsure:
            return self.claims.claims()
        self.listed += 1
        claims = await list_claims(self.api, self.namespace)
        if self.claims is not None:
            self.claims.listed(claims)
        self._unsure = False
        return claims

    async def _adopt(self, claim: Claim) -> None:
        """Rebuild what a newly held project needs (`on_acquired`), then act on it. A failure
        leaves it unready (owns() False) and is retried at the next pass: never acting on a
        project whose state was not rebuilt at its current epoch."""
        if self._on_acquired is not None:
            try:
                await self._on_acquired(claim)
            except Exception:
                log.exception("project %s not adopted by %s (retried at the next pass)", claim.project, self.replica)
                return
        self._held[claim.project] = claim
        if self._on_ready is not None:  # owns() is True from here: the hook may act on the project
            try:
                await self._on_ready(claim.project)
            except Exception:
                log.exception("project %s acquired by %s, but not resumed", claim.project, self.replica)

    async def _let_go(self, project: str) -> None:
        """Stop acting on `project` (owns() is False from here on), then drain it."""
        self._held.pop(project, None)
        if self._drain is not None:
            await self._drain(project)

    async def run(self, stop: asyncio.Event) -> None:
        """Hold membership and run passes until `stop` is set, then hand everything over.
        Cancelled: stop writing at once (a crash, as far as the others can tell)."""
        member_stop = asyncio.Event()
        renewer = asyncio.create_task(self.member.run(member_stop))
        watching = self.claims.watch if self.claims is not None else None
        watcher = asyncio.create_task(watching.run()) if watching is not None else None
        try:
            while not stop.is_set():
                if self.fence.valid():
                    try:
                        await self.step()
                    except ApiError as error:  # an outage: our fence closes by itself if it lasts
                        log.info("shard pass of %s failed: %s", self.replica, error)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval)
            await self.hand_over()
        except asyncio.CancelledError:
            self._held.clear()
            self.fence.close()
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        member_stop.set()
        await renewer  # releases the membership Lease

    async def hand_over(self) -> None:
        """Drain and release every project we hold (a clean shutdown)."""
        held, self._held = dict(self._held), {}
        if self._drain is not None:  # all at once: a hand-over is bounded by the slowest project, not their sum
            await asyncio.gather(*(self._drain(project) for project in held))
        results = await asyncio.gather(*(release(self.api, self.namespace, c, self.replica, self._wall)
                                         for c in held.values()), return_exceptions=True)
        if self.claims is not None:
            for result in results:
                if isinstance(result, Claim):
                    self.claims.wrote(result)
        failed = [c.project for c, r in zip(held.values(), results, strict=True) if isinstance(r, BaseException)]
        if failed:  # they are adopted once our membership is released or runs out
            log.info("%d claims not released by %s: %s", len(failed), self.replica, ", ".join(failed[:20]))
