"""Claims: who actually owns a project, written to the API server with compare-and-swap.

The ring only says who *should* own a project; replicas that compute it from different views
of membership would both act (Argo CD's sharding bugs). A claim is the single point of truth:
a replica acts on a project only while it holds the project's claim, and takes it only by a
conditional write that the API server lets exactly one writer win.

Layout of a claim Lease (in the operator's namespace, one per project ever owned):

    metadata.name          stead-project-<project>     when the project is a DNS label
                           stead-project.<xxh3 hex>    otherwise (a label value: '_', upper case);
                                                       a DNS label has no '.', so the two never meet
    metadata.labels        app.kubernetes.io/name=stead, stead.dev/role=claim,
                           stead.dev/project=<project>  (the exact project, checked on read)
    metadata.annotations   stead.dev/holder-incarnation: <the holder's membership incarnation>
    spec.holderIdentity    <replica id>; absent when released
    spec.leaseTransitions  the epoch: +1 on every acquisition (a release keeps it)
    spec.acquireTime       when the current holder took it
    spec.renewTime         the last write (acquisition or release)

A claim goes when its project does: the holder of a claim whose project has had no objects for
at least one lease (`coordinator.Vacancy`) deletes it, on condition of the uid and the
resourceVersion it read (`collect`), so a claim that changed hands meanwhile is never deleted.
Without that, `stead-project-*` Leases would pile up for every project that ever existed, and
every coordinator pass would LIST them all. A project that comes back is claimed afresh: a new
Lease, epoch 1 again, and a new uid; what a replica keeps of a claim is valid for its
(uid, epoch), never for the epoch alone.

Claims are not renewed. A claim is valid while its holder's *membership* Lease is live with the
incarnation the claim names (`Claim.valid`). Renewing one Lease per project instead would cost
P x 60 / (duration / 3) writes a minute: 120,000 a minute (2,000 a second) for 10,000 projects
at a 15 s lease, which is more than the API server of a small cluster serves in all. With
membership-only renewal the steady cost is R x 12 writes a minute for R replicas (36 for three)
whatever the number of projects; claims are written only on hand-over: one write per
acquisition (a create, or a replace of a released or dead holder's claim) and one per release,
so scaling 2 -> 3 replicas with P projects costs about 2 x P/3 writes once.

Reading them is one WATCH per replica (`ClaimCache`: label-selected, so only claims travel, and
only the claims that change), listed once when it starts and again only after a 410 or a failure
(`kube.watch.Watch`); a coordinator pass reads the cache, so its requests do not grow with the
number of projects. While the watch is not in sync (starting, failing) a pass LISTs them instead
(`list_claims`), as every pass once did.

The epoch is what keeps a project moving A -> B -> A from using stale data: every acquisition
has a new epoch, and what a replica keeps for a project is valid only for the epoch it was
built under.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from operators.runtime.core.ring import PROJECT_LABEL
from operators.runtime.kube.client import ApiError, KubeClient, Requester
from operators.runtime.kube.watch import Selection, Watch, WatchMetrics
from operators.runtime.shard.fence import Fence
from operators.runtime.shard.leases import (
    create_lease,
    get_lease,
    lease_body,
    lease_selector,
    leases_path,
    list_leases,
    meta_of,
    micro_time,
    parse_time,
    replace_lease,
    spec_of,
    wall_now,
)
from operators.runtime.shard.ring import point

CLAIM_ROLE = "claim"
CLAIM_PREFIX = "stead-project"
HOLDER_INCARNATION_ANNOTATION = "stead.dev/holder-incarnation"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MAX_NAME = 253


def claim_name(project: str) -> str:
    """The claim Lease's name: readable where the project allows it, a stable hash otherwise."""
    if not project:
        raise ValueError("a project has a name")
    readable = f"{CLAIM_PREFIX}-{project}"
    if _DNS_LABEL.match(project) and len(readable) <= _MAX_NAME:
        return readable
    return f"{CLAIM_PREFIX}.{point(project):016x}"


class ClaimMismatch(Exception):
    """A claim Lease names another project than the one asked for (a 64-bit hash collision, or
    a Lease written by hand): never treated as this project's claim."""


@dataclass(frozen=True)
class Claim:
    """A project's claim as read (or as absent: `resource_version` empty)."""

    project: str
    holder: str = ""
    incarnation: str = ""
    epoch: int = 0
    resource_version: str = ""
    acquired_at: datetime | None = None
    uid: str = ""
    """The Lease's uid: a claim deleted and created again is another claim, at epoch 1 again."""

    @property
    def name(self) -> str:
        return claim_name(self.project)

    @property
    def exists(self) -> bool:
        return bool(self.resource_version)

    @property
    def free(self) -> bool:
        """Never taken, or released."""
        return not self.holder

    def valid(self, live: Mapping[str, str]) -> bool:
        """Held by a live member under the incarnation it holds now (`live`: id -> incarnation)."""
        return bool(self.holder) and live.get(self.holder) == self.incarnation

    def held_by(self, replica: str, incarnation: str | None) -> bool:
        return bool(self.holder) and self.holder == replica and self.incarnation == incarnation

    @classmethod
    def from_lease(cls, obj: Mapping[str, Any], project: str | None = None) -> Claim:
        meta, spec = meta_of(obj), spec_of(obj)
        named = str((meta.get("labels") or {}).get(PROJECT_LABEL) or "")
        if project is not None and named != project:
            raise ClaimMismatch(f"claim Lease {meta.get('name')} is for project {named!r}, not {project!r}")
        return cls(
            project=named, holder=str(spec.get("holderIdentity") or ""),
            incarnation=str((meta.get("annotations") or {}).get(HOLDER_INCARNATION_ANNOTATION) or ""),
            epoch=int(spec.get("leaseTransitions") or 0), resource_version=str(meta.get("resourceVersion") or ""),
            acquired_at=parse_time(spec.get("acquireTime")), uid=str(meta.get("uid") or ""),
        )

    @property
    def term(self) -> tuple[str, int]:
        """What identifies one holding of the claim: (uid, epoch). The epoch alone restarts at 1
        when a collected claim is created again."""
        return self.uid, self.epoch


async def read_claim(api: Requester, namespace: str, project: str) -> Claim:
    try:
        return Claim.from_lease(await get_lease(api, namespace, claim_name(project)), project)
    except ApiError as error:
        if error.status == 404:
            return Claim(project)
        raise


async def list_claims(api: Requester, namespace: str) -> dict[str, Claim]:
    """Every claim, by project (one label-selected LIST)."""
    claims: dict[str, Claim] = {}
    for obj in await list_leases(api, namespace, CLAIM_ROLE):
        claim = _claim_of(obj)
        if claim is not None:
            claims[claim.project] = claim
    return claims


def _claim_of(obj: Mapping[str, Any]) -> Claim | None:
    """The claim a Lease of the claim role holds; None for a Lease whose name is not its project's
    claim name (written by hand): nobody's claim."""
    claim = Claim.from_lease(obj)
    return claim if claim.project and meta_of(obj).get("name") == claim.name else None


def _version(claim: Claim) -> int | None:
    """The claim's resourceVersion as a number: etcd's revision, which grows with every write (None
    when it is not a number: then versions are not compared, the watch is believed)."""
    return int(claim.resource_version) if claim.resource_version.isdigit() else None


class ClaimCache:
    """Every claim, as one WATCH of the claim Leases keeps them (`watching`), read by each coordinator
    pass instead of a LIST (`claims`).

    Two sources, one rule: the watch's events (`tap`, in the API server's order), and the answers to
    our own writes (`wrote`, `deleted`), which the next pass must see even if the watch has not yet
    delivered them: else it would take a claim just acquired for one it lost and drain its project.
    What we wrote stays in front of the watch until the watch shows that version or a newer one
    (resourceVersions compared as etcd revisions). So the cache never goes back to an older version
    of a claim we wrote: a late event of our acquisition, arriving after we released or deleted the
    claim, would make us hold again what another replica may take. A DELETED event always removes a
    claim (at worst we see one of ours absent for a pass: we drain and re-adopt it, never act on
    what is not ours). Whatever is stale otherwise is as safe as a LIST a moment old: every write is
    a compare-and-swap on the version read, and a claim taken over from us is one of a past
    incarnation of ours, which `held_by` already refuses.
    """

    def __init__(self) -> None:
        self.watch: Watch | None = None
        self._seen: dict[str, Claim] = {}  # Lease name -> the claim as the watch last showed it
        self._ours: dict[str, tuple[Claim | None, int | None]] = {}  # name -> what we wrote (None: deleted), version

    @classmethod
    def watching(cls, kube: KubeClient, namespace: str, metrics: WatchMetrics | None = None) -> ClaimCache:
        """A cache fed by a label-selected watch of the claim Leases in `namespace` (run `watch.run()`)."""
        cache = cls()
        selection = Selection(lease_selector(CLAIM_ROLE), lambda _labels: True)  # the API server filters
        cache.watch = Watch(kube, leases_path(namespace), "Lease", None, selection=selection, metrics=metrics)
        cache.watch.add_tap(cache.tap)
        return cache

    @property
    def in_sync(self) -> bool:
        """The watch has listed the claims and follows them: `claims()` is what the API server holds,
        but for the milliseconds an event takes."""
        return self.watch is not None and self.watch.in_sync

    def claims(self) -> dict[str, Claim]:
        """Every claim, by project (what we wrote in front of what the watch showed)."""
        merged = dict(self._seen)
        for name, (claim, _) in self._ours.items():
            if claim is None:
                merged.pop(name, None)
            else:
                merged[name] = claim
        return {claim.project: claim for claim in merged.values()}

    def __len__(self) -> int:
        return len(self._seen)

    def tap(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """One event of the watch (`Watch.add_tap`): None (listed), ADDED, MODIFIED or DELETED."""
        name = str(meta_of(body).get("name") or "")
        if event_type == "DELETED":
            self._seen.pop(name, None)
            self._ours.pop(name, None)
            return
        claim = _claim_of(body)
        if claim is None:
            self._seen.pop(name, None)
            return
        self._seen[name] = claim
        if name in self._ours:
            wrote, version = self._ours[name]
            # past what we deleted only when newer than the version deleted (a late event of it is not)
            if self._caught_up(claim, version, strictly=wrote is None):
                del self._ours[name]

    def wrote(self, claim: Claim) -> None:
        """The API server's answer to our write of `claim` (acquired, released)."""
        self._remember(claim.name, claim, _version(claim))

    def deleted(self, claim: Claim) -> None:
        """We deleted `claim` (as it was: its version is that of the DELETE's precondition)."""
        self._remember(claim.name, None, _version(claim))

    def listed(self, claims: Mapping[str, Claim]) -> None:
        """A LIST of every claim (`list_claims`), read after a pass whose writes may have landed
        unanswered (a timeout): in front of the watch as our own writes are, so that the watch,
        should it lag, cannot show an older version than the LIST did. A claim missing from the LIST
        is in front as deleted after the version last seen."""
        names = {claim.name for claim in claims.values()}
        for claim in claims.values():
            self._remember(claim.name, claim, _version(claim))
        for name, seen in list(self._seen.items()):
            if name not in names:
                self._remember(name, None, _version(seen))
        for name, (wrote, version) in list(self._ours.items()):
            if wrote is not None and name not in names:
                self._remember(name, None, version)

    def _remember(self, name: str, claim: Claim | None, version: int | None) -> None:
        seen = self._seen.get(name)
        if seen is not None and claim is not None and (
                seen.resource_version == claim.resource_version or self._caught_up(seen, version)):
            return  # the watch was quicker than the answer
        self._ours[name] = (claim, version)

    @staticmethod
    def _caught_up(seen: Claim, version: int | None, strictly: bool = False) -> bool:
        """Whether the watch's `seen` is as new as what we wrote at `version`, or newer (`strictly`)."""
        have = _version(seen)
        if have is None or version is None:
            return True
        return have > version if strictly else have >= version


def _body(namespace: str, claim: Claim, spec: Mapping[str, Any], incarnation: str | None) -> dict[str, Any]:
    return lease_body(
        namespace, claim.name, CLAIM_ROLE, spec, labels={PROJECT_LABEL: claim.project},
        annotations={HOLDER_INCARNATION_ANNOTATION: incarnation} if incarnation else None,
        resource_version=claim.resource_version or None,
    )


async def acquire(
    api: Requester, namespace: str, claim: Claim, replica: str, fence: Fence, live: Mapping[str, str],
    wall: Callable[[], datetime] = wall_now,
) -> Claim | None:
    """Take `claim` (as read) for `replica` under the fence's incarnation. Returns the claim now
    held, or None when it is not ours: held by a live member, or someone else's write came first
    (the API server's 409: the compare-and-swap lost). Raises `FenceExpired` when our own
    membership may have lapsed: a replica that may be dead takes nothing.

    Only a free claim, or one whose holder is not live under the claim's incarnation (`live`
    from `membership.Liveness`), is taken: the ring never decides alone.
    """
    fence.check()
    incarnation = fence.incarnation
    if claim.held_by(replica, incarnation):
        return claim
    if claim.valid(live):
        return None
    now = micro_time(wall())
    spec = {"holderIdentity": replica, "leaseTransitions": claim.epoch + 1, "acquireTime": now, "renewTime": now}
    body = _body(namespace, claim, spec, incarnation)
    try:
        answer = await (replace_lease(api, body) if claim.exists else create_lease(api, body))
    except ApiError as error:
        if error.status in (404, 409):  # written (or deleted) since we read it: another replica won
            return None
        raise
    return Claim.from_lease(answer, claim.project)


async def release(
    api: Requester, namespace: str, claim: Claim, replica: str, wall: Callable[[], datetime] = wall_now,
) -> Claim | None:
    """Give up `claim` (as we hold it): clear the holder, keep the epoch. Returns the released
    claim, or None when it had already changed (taken over after our membership lapsed).

    Needs no open fence: the write is conditional on the version we hold, so it can only ever
    free what is still ours; freeing it at once spares the next owner a wait for our lease.
    Call it only after the project's work is drained (no write of ours may follow it).
    """
    if claim.holder != replica or not claim.exists:
        return None
    spec = {"leaseTransitions": claim.epoch, "renewTime": micro_time(wall())}
    try:
        answer = await replace_lease(api, _body(namespace, claim, spec, None))
    except ApiError as error:
        if error.status in (404, 409):
            return None
        raise
    return Claim.from_lease(answer, claim.project)


async def collect(api: Requester, namespace: str, claim: Claim, replica: str) -> bool:
    """Delete `claim` (as we hold it: its project has had no objects for a while). Returns whether
    it was deleted; False when it had changed since we read it (taken over, released, deleted).

    The DELETE carries preconditions on the uid and resourceVersion we read: the API server
    refuses it (409) unless the claim is exactly the one we hold, so a claim that changed hands
    is never deleted, and a claim created again under the same name (another uid) neither.
    Like `release`, it needs no open fence; call it only after the project is drained.
    """
    if claim.holder != replica or not claim.exists or not claim.uid:
        return False
    options = {"apiVersion": "v1", "kind": "DeleteOptions",
               "preconditions": {"uid": claim.uid, "resourceVersion": claim.resource_version}}
    try:
        await api.request("DELETE", leases_path(namespace, claim.name), options)
    except ApiError as error:
        if error.status in (404, 409):
            return False
        raise
    return True


def released(claim: Claim) -> Claim:
    """`claim` as it looks once freed (pure, for the coordinator's simulations)."""
    return replace(claim, holder="", incarnation="")
