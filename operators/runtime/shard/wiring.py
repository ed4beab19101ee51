"""`--sharding leases`: a `ShardMember` wired to the operator's reconcilers.

`Sharding` owns the replica's `ShardMember` and answers the reconcilers' questions:
- `owns(project)`: the claim is ours under our open incarnation (the ring is never asked);
- `guard`: the `WriteGuard` every write of the engine passes (`FencedKube` for the services'
  client, the reconcilers' status, finalizer and Event writes);
- the projects that exist: those of every object the reconcilers have seen, cluster-scoped
  objects under the pseudo-project `CLUSTER_PROJECT`.

What a replica receives (`follow`, `select`): the watches of namespaced kinds ask the API server
only for objects labelled with the buckets the ring places on us (`stead.dev/shard-bucket`, set
by the mutating webhook), plus the buckets of the claims we still hold; after every pass of the
member their selection follows the ring and the claims. So a replica receives, decodes and
keeps only its share of the events, and learns of the projects it should take from the objects
in its buckets. Cluster-scoped kinds are few and every replica watches them whole (objects of
every project may refer to them; only the holder of `CLUSTER_PROJECT` acts on them).

Objects the webhook did not label, or labelled for another project, are put right by
`labelling.Labeller` (`labellers`, `feed`).

Moving a project, old owner: `drain` (every reconciler stops, settles and forgets it), then
the claim is released (`ShardMember`). New owner: the claim is taken by compare-and-swap at a
new epoch, then `_acquired` lists the project (each kind: its namespace, and the objects
labelled into it elsewhere) and every reconciler `rebuild`s (drops its store records of the
project: nothing from an earlier epoch is reused), then once `owns` is True `resume` acts on
the listing exactly as a restarted operator acts on its watches' first listing (Provisioned objects
adopted from their status, runs in flight followed from their finished steps).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from operators.runtime.core.kinds import Kind
from operators.runtime.core.ring import DEFAULT_EPSILON, PROJECT_LABEL, Placement, project_key, project_of
from operators.runtime.kube.client import ApiError, KubeClient, core_path, custom_path, list_all
from operators.runtime.kube.events import event_body
from operators.runtime.kube.watch import NOTHING, Deliver, Selection, Watch, WatchMetrics
from operators.runtime.shard.claims import Claim, ClaimCache, claim_name
from operators.runtime.shard.guard import FencedKube, WriteGuard
from operators.runtime.shard.labelling import Labeller
from operators.runtime.shard.membership import DEFAULT_DURATION
from operators.runtime.shard.ring import (
    BUCKET_LABEL,
    CLUSTER_PROJECT,
    DEFAULT_BUCKETS,
    bucket_of,
    bucket_selector,
    buckets_of,
    by_bucket,
    layout,
)
from operators.runtime.shard.runner import ShardMember

log = logging.getLogger(__name__)

def selecting(buckets: frozenset[int]) -> Selection:
    """The watch selection of objects in `buckets` (nothing at all for none)."""
    if not buckets:
        return NOTHING
    values = frozenset(str(b) for b in buckets)
    return Selection(bucket_selector(buckets), lambda labels: labels.get(BUCKET_LABEL) in values)


class ProjectWork(Protocol):
    """What `Sharding` needs of a reconciler (`operators.runtime.engine.reconciler.Reconciler`)."""

    kind: Kind

    def placements(self) -> set[tuple[str, str]]: ...

    def prepare(self, project: str) -> None: ...

    async def drain(self, project: str) -> None: ...

    def rebuild(self, project: str, listed: Sequence[Mapping[str, Any]]) -> None: ...

    def resume(self, project: str) -> None: ...


def _key(project: str) -> str:
    return project or CLUSTER_PROJECT


class Sharding:
    """One replica's share of the projects, for the reconcilers (see the module's docstring)."""

    def __init__(self, kube: KubeClient, namespace: str, replica: str, *, duration: int = DEFAULT_DURATION,
                 interval: float | None = None, buckets: int = DEFAULT_BUCKETS,
                 metrics: WatchMetrics | None = None, placement: str = "ring",
                 epsilon: float = DEFAULT_EPSILON, watch_kube: KubeClient | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.replica = replica
        self.buckets = buckets
        self.works: list[ProjectWork] = []
        # the claims from one WATCH (on `watch_kube`: a watch holds its connection for minutes)
        self.claims = ClaimCache.watching(watch_kube or kube, namespace, metrics)
        self.member = ShardMember(kube, namespace, replica, self._projects, duration=duration, interval=interval,
                                  claims=self.claims,
                                  drain=self._drain, on_acquired=self._acquired, on_ready=self._ready,
                                  placement=by_bucket(buckets), on_pass=self._after_pass,
                                  count=metrics.inc if metrics is not None else None,
                                  layout=layout(placement, epsilon, buckets))
        self.guard = WriteGuard(self.owns, self.member.fence)
        self.labeller = Labeller(kube, replica, self.member.fence, buckets, metrics)
        self.selected: frozenset[int] = frozenset()
        """The buckets our watches of namespaced kinds select now."""
        self._metrics = metrics
        self._watches: list[Watch] = []
        self._watches_of: dict[str, list[Watch]] = {}  # kind -> its followed watches (one per scope)
        self._ring: Placement | None = None
        self._placed: frozenset[int] = frozenset()  # the buckets the ring of the last pass places on us
        self._reported: set[str] = set()  # projects unowned for too long, already said in an Event
        self._labelled: dict[str, set[str]] = {}  # namespace -> projects labelled into it (other than itself)
        self.adopted: dict[str, float] = {}  # project -> seconds its last acquisition took (list + rebuild)

    def owns(self, project: str) -> bool:
        return self.member.owns(_key(project))

    def follow(self, watches: Iterable[Watch]) -> None:
        """Make `watches` (of namespaced kinds) select our buckets from now on (nothing until the
        first pass has placed any on us)."""
        for watch in watches:
            watch.select(selecting(self.selected))
            self._watches.append(watch)
            self._watches_of.setdefault(watch.kind, []).append(watch)

    def feed(self, deliver: Deliver, plural: str) -> Deliver:
        """`deliver` behind the check of the bucket label (`Labeller.check`)."""
        return self.labeller.check(deliver, plural)

    def labellers(self, kube: KubeClient, kinds: Iterable[Kind], scopes: Iterable[str | None]) -> list[Watch]:
        """The watches of objects without a bucket label (`Labeller.watches`)."""
        return self.labeller.watches(kube, kinds, scopes)

    async def _after_pass(self) -> None:
        await self._select()
        await self._report_unowned()

    async def _report_unowned(self) -> None:
        """An Event (on the project's claim Lease, in our namespace) for each project that has had no
        owner for longer than the lease since the last report: replicas that abstain for long (views
        that disagree, a replica that keeps its membership but never acquires) must be visible."""
        unowned = set(self.member.unowned)
        for project in sorted(unowned - self._reported):
            if self._metrics is not None:
                self._metrics.inc("stead_shard_unowned_total")
            if not self.member.fence.valid():
                continue
            name = claim_name(project)
            involved = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": name,
                        "namespace": self.namespace}
            event = event_body(involved, self.namespace, "Warning", "ProjectUnowned",
                               f"project {project} has had no owner for over {self.member.sweep.grace:g}s "
                               "(no live replica holds its claim)", self.replica)
            try:
                await self.kube.request("POST", core_path("events", self.namespace), event)
            except ApiError as error:
                log.info("%s: Event for unowned project %s not posted: %s", self.replica, project, error)
        self._reported = unowned

    async def _select(self) -> None:
        """After each pass: select the buckets the ring places on us and those of the claims we hold."""
        ring = self.member.ring
        if ring is not self._ring:
            self._ring = ring
            self._placed = buckets_of(ring, self.replica, self.buckets) if ring is not None else frozenset()
            await self.labeller.place(self._placed)
        wanted = self._placed | {bucket_of(_key(p), self.buckets) for p in self.member.claimed}
        if wanted != self.selected:
            self.selected = frozenset(wanted)
            for watch in self._watches:
                watch.select(selecting(self.selected))

    def fenced(self, kube: KubeClient) -> FencedKube:
        """`kube` with every write checked by our guard (the operator's own namespace: the fence only)."""
        return FencedKube(kube, self.guard, self.projects_in, exempt=(self.namespace,))

    def projects_in(self, namespace: str) -> Iterable[str]:
        return [*sorted(self._labelled.get(namespace, ())), namespace]

    async def _projects(self) -> set[str]:
        projects: set[str] = set()
        labelled: dict[str, set[str]] = {}
        for work in self.works:
            for namespace, project in work.placements():
                projects.add(_key(project))
                if project != namespace and namespace:
                    labelled.setdefault(namespace, set()).add(project)
        self._labelled = labelled
        return projects

    async def _drain(self, project: str) -> None:
        original = "" if project == CLUSTER_PROJECT else project
        await asyncio.gather(*(work.drain(original) for work in self.works))
        log.info("%s: project %s drained", self.replica, project)

    async def _acquired(self, claim: Claim) -> None:
        """List the project (every kind) and rebuild the reconcilers' state of it; raises on a
        failed list (the member retries at its next pass, the project stays not ours meanwhile)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        project = "" if claim.project == CLUSTER_PROJECT else claim.project
        for work in self.works:  # events from here on are kept: none is lost while the listing is read
            work.prepare(project)
        listings = await asyncio.gather(*(self._list(work.kind, project) for work in self.works))
        for work, listed in zip(self.works, listings, strict=True):
            work.rebuild(project, listed)
        self.adopted[claim.project] = loop.time() - started
        log.info("%s: project %s acquired at epoch %d (%d objects listed)", self.replica, claim.project,
                 claim.epoch, sum(map(len, listings)))

    async def _ready(self, project: str) -> None:
        original = "" if project == CLUSTER_PROJECT else project
        for work in dependencies_first(self.works):  # what others depend on is adopted into the store first
            work.resume(original)

    async def _list(self, kind: Kind, project: str) -> list[dict[str, Any]]:
        """Every object of `kind` in `project`: its namespace's (the project's own namespace, less
        those labelled into another project) and those labelled into it anywhere.

        When our watches of the kind cover the project's bucket (selected and listed), they know
        where its objects are: only those namespaces are listed, and a kind with none is not listed
        at all (an object created meanwhile reaches the reconciler as an event, kept since
        `prepare`). Else every namespace is searched by label."""
        items: dict[str, dict[str, Any]] = {}
        if kind.cluster_scoped:
            if project:  # cluster-scoped objects labelled into a namespace's project
                found = await self._get(custom_path(kind.plural), {"labelSelector": f"{PROJECT_LABEL}={project}"})
            else:
                found = [o for o in await self._get(custom_path(kind.plural), {}) if not project_of(o)]
        elif not project:
            return []
        elif (namespaces := self._where(kind, project)) is not None:
            found = []
            for namespace in sorted(namespaces):
                listed = await self._get(custom_path(kind.plural, namespace), {})
                found += [o for o in listed if project_of(o) == project]
        else:
            found = [o for o in await self._get(custom_path(kind.plural, project), {}) if project_of(o) == project]
            found += await self._get(custom_path(kind.plural), {"labelSelector": f"{PROJECT_LABEL}={project}"})
        for item in found:
            meta = item.get("metadata") or {}
            items[str(meta.get("uid"))] = {**item, "kind": kind.kind}
        return list(items.values())

    def _where(self, kind: Kind, project: str) -> set[str] | None:
        """The namespaces holding objects of `kind` in `project`, from our watches; None when they
        do not cover the project's bucket."""
        watches = self._watches_of.get(kind.kind)
        labels = {BUCKET_LABEL: str(bucket_of(project, self.buckets))}
        if not watches or not all(watch.covers(labels) for watch in watches):
            return None
        return set().union(*(watch.namespaces_where(lambda ns, found: project_key(found, ns) == project)
                             for watch in watches))

    async def _get(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        items, _ = await list_all(self.kube, path, params)
        return items


def dependencies_first(works: Sequence[ProjectWork]) -> list[ProjectWork]:
    """`works` ordered so that a kind comes after the kinds its objects depend on (`Kind.depends_on`)."""
    ordered: list[ProjectWork] = []
    left = list(works)
    while left:
        done = {w.kind.kind for w in ordered}
        ready = [w for w in left if not (set(w.kind.depends_on) - done - {w.kind.kind}) & {x.kind.kind for x in left}]
        for work in ready or left[:1]:  # a cycle: any order
            ordered.append(work)
            left.remove(work)
    return ordered
