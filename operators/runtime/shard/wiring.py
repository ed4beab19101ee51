"""`--sharding leases`: a `ShardMember` wired to the operator's reconcilers.

`Sharding` owns the replica's `ShardMember` and answers the reconcilers' questions:
- `owns(project)`: the claim is ours under our open incarnation (the ring is never asked);
- `guard`: the `WriteGuard` every write of the engine passes (`FencedKube` for the services'
  client, the reconcilers' status, finalizer and Event writes);
- the projects that exist: those of every object the reconcilers have seen (every replica
  receives every event while Kopf's watches are unfiltered), cluster-scoped objects under the
  pseudo-project `CLUSTER_PROJECT`.

Moving a project, old owner: `drain` (every reconciler stops, settles and forgets it), then
the claim is released (`ShardMember`). New owner: the claim is taken by compare-and-swap at a
new epoch, then `_acquired` lists the project (each kind: its namespace, and the objects
labelled into it elsewhere) and every reconciler `rebuild`s (drops its store records of the
project: nothing from an earlier epoch is reused), then once `owns` is True `resume` acts on
the listing exactly as a restarted operator acts on Kopf's initial listing (Provisioned objects
adopted from their status, runs in flight followed from their finished steps).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from operators.runtime.core.kinds import Kind
from operators.runtime.core.ring import PROJECT_LABEL, project_of
from operators.runtime.kube.client import KubeClient, custom_path
from operators.runtime.shard.claims import Claim
from operators.runtime.shard.guard import FencedKube, WriteGuard
from operators.runtime.shard.membership import DEFAULT_DURATION
from operators.runtime.shard.runner import ShardMember

log = logging.getLogger(__name__)

CLUSTER_PROJECT = "stead-cluster-scoped"
"""The project of cluster-scoped objects (they have no namespace): one replica handles them all."""


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
                 interval: float | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.replica = replica
        self.works: list[ProjectWork] = []
        self.member = ShardMember(kube, namespace, replica, self._projects, duration=duration, interval=interval,
                                  drain=self._drain, on_acquired=self._acquired, on_ready=self._ready)
        self.guard = WriteGuard(self.owns, self.member.fence)
        self._labelled: dict[str, set[str]] = {}  # namespace -> projects labelled into it (other than itself)
        self.adopted: dict[str, float] = {}  # project -> seconds its last acquisition took (list + rebuild)

    def owns(self, project: str) -> bool:
        return self.member.owns(_key(project))

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
        those labelled into another project) and those labelled into it anywhere."""
        items: dict[str, dict[str, Any]] = {}
        if kind.cluster_scoped:
            if project:  # cluster-scoped objects labelled into a namespace's project
                found = await self._get(custom_path(kind.plural), {"labelSelector": f"{PROJECT_LABEL}={project}"})
            else:
                found = [o for o in await self._get(custom_path(kind.plural), {}) if not project_of(o)]
        else:
            if not project:
                return []
            found = [o for o in await self._get(custom_path(kind.plural, project), {}) if project_of(o) == project]
            found += await self._get(custom_path(kind.plural), {"labelSelector": f"{PROJECT_LABEL}={project}"})
        for item in found:
            meta = item.get("metadata") or {}
            items[str(meta.get("uid"))] = {**item, "kind": kind.kind}
        return list(items.values())

    async def _get(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        query = {**params, "limit": "500"}
        while True:
            page = await self.kube.request("GET", path, params=query)
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items
            query = {**params, "limit": "500", "continue": cont}



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
