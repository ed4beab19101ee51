"""The bucket label of objects the mutating webhook did not label.

With several replicas every object of a namespaced kind carries `stead.dev/shard-bucket`, set by
the mutating webhook when it is created or updated; the replicas' watches select by it. Two kinds
of object escape the webhook, and `Labeller` puts them right, writing the label and nothing else:

- objects without the label (created before sharding was turned on, or while the webhook was
  bypassed with `failurePolicy: Ignore`): each replica watches them (`!stead.dev/shard-bucket`)
  and labels those whose bucket the ring places on it; the others are kept, since the ring may
  change (`place`);
- objects whose label is not their project's (the project label changed while the webhook was
  bypassed): the replica that receives them relabels them (`check`), and their events then reach
  the replica of the right bucket.

A write is made only while our own lease is valid (fence), and counted (`stead_shard_labelled_total`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from operators.runtime.core.kinds import Kind
from operators.runtime.kube.client import ApiError, KubeClient, custom_path
from operators.runtime.kube.watch import NOTHING, Deliver, Selection, Watch, WatchMetrics
from operators.runtime.shard.fence import Fence
from operators.runtime.shard.ring import BUCKET_LABEL, bucket_label

log = logging.getLogger(__name__)

UNLABELLED = Selection(f"!{BUCKET_LABEL}", lambda labels: BUCKET_LABEL not in labels)


class Labeller:
    """One replica's part in labelling (see the module's docstring)."""

    def __init__(self, kube: KubeClient, replica: str, fence: Fence, buckets: int,
                 metrics: WatchMetrics | None = None) -> None:
        self._kube = kube
        self._replica = replica
        self._fence = fence
        self._buckets = buckets
        self._metrics = metrics
        self._watches: list[Watch] = []
        self._placed: frozenset[int] = frozenset()
        self._unlabelled: dict[str, tuple[str, Mapping[str, Any]]] = {}  # left for the bucket's ring owner

    def watches(self, kube: KubeClient, kinds: Iterable[Kind], scopes: Iterable[str | None]) -> list[Watch]:
        """A watch per namespaced kind (and scope) of the objects without the label, paused until
        the ring places buckets on us (`place`)."""
        scopes = list(scopes)
        for kind in kinds:
            if not kind.cluster_scoped:
                self._watches += [Watch(kube, custom_path(kind.plural, scope), kind.kind, self._unlabelled_event(
                    kind.plural), selection=NOTHING, metrics=self._metrics) for scope in scopes]
        return list(self._watches)

    async def place(self, placed: frozenset[int]) -> None:
        """The ring places `placed` on us now: watch for unlabelled objects while it places any,
        and label those kept under the last ring that are ours now."""
        self._placed = placed
        for watch in self._watches:
            watch.select(UNLABELLED if placed else NOTHING)
        for key in list(self._unlabelled):
            await self._label(key)

    def check(self, deliver: Deliver, plural: str) -> Deliver:
        """`deliver` (a reconciler's `on_event`), behind the check that an object's bucket label is
        its project's: a mislabelled object is relabelled, not delivered."""

        async def on_event(event_type: str | None, body: Mapping[str, Any]) -> None:
            if event_type != "DELETED":
                meta = body.get("metadata") or {}
                labels = meta.get("labels") or {}
                value = bucket_label(labels, str(meta.get("namespace") or ""), self._buckets)
                if labels.get(BUCKET_LABEL) != value:
                    await self._write(plural, meta, value)
                    return
            await deliver(event_type, body)

        return on_event

    def _unlabelled_event(self, plural: str) -> Deliver:
        async def on_event(event_type: str | None, body: Mapping[str, Any]) -> None:
            meta = body.get("metadata") or {}
            key = f"{plural}/{meta.get('namespace') or ''}/{meta.get('name') or ''}"
            if event_type == "DELETED" or BUCKET_LABEL in (meta.get("labels") or {}):
                self._unlabelled.pop(key, None)
                return
            self._unlabelled[key] = (plural, meta)
            await self._label(key)

        return on_event

    async def _label(self, key: str) -> None:
        plural, meta = self._unlabelled[key]
        value = bucket_label(meta.get("labels") or {}, str(meta.get("namespace") or ""), self._buckets)
        if int(value) not in self._placed:
            return  # the ring places it on another replica (kept: the ring may change)
        if await self._write(plural, meta, value):
            self._unlabelled.pop(key, None)

    async def _write(self, plural: str, meta: Mapping[str, Any], value: str) -> bool:
        """Write the bucket label of one object (the label only); True when written or gone."""
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if not self._fence.valid():
            return False
        try:
            await self._kube.request("PATCH", custom_path(plural, namespace or None, name),
                                     {"metadata": {"labels": {BUCKET_LABEL: value}}},
                                     content_type="application/merge-patch+json")
        except ApiError as error:
            if error.status != 404:
                log.info("%s: bucket label of %s %s/%s not written: %s", self._replica, plural, namespace, name,
                         error)
                return False
        if self._metrics is not None:
            self._metrics.inc("stead_shard_labelled_total", plural=plural)
        return True
