"""The service identities of every ServiceInstance, kept in memory from the operator's own watch of them.

Why: a creation (and a validation) must know whether another instance of the entity holds its identity
value. Asking the API server means a LIST of every instance of the namespace per creation, in the
pipeline and again in the admission webhook: a burst of N creations then costs O(N²) bytes to encode,
send and decode (issue 31, item 9: at 200 instances it was 14% of the operator's samples, and admission's
LIST missed its 5 s timeout, refusing creates). The watch the reconciler is fed from already decodes every
instance; this index taps it (`Watch.add_tap`: one watch, one decoding, for both) and answers a lookup
by identity value in O(1).

Why it is as good as the LIST for the pipeline's tie-break (the older of two instances with one identity
keeps it): a watch delivers a namespace's events in the order the API server wrote them, and the index is
told of each event before it is queued for the reconciler, so when an instance is reconciled for its
creation, every instance created before it is known here. Admission counts every other instance, as it
did: two creations sent at once may both pass it, with the LIST too, and the pipeline decides.

It is used only where it sees everything: the watch of every namespace (not with sharding nor
`--namespace`), listed and in sync; otherwise, and in the inventory API (no watch), `World` LISTs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators.lsm.models import SERVICE_INSTANCE
from operators.runtime import Watch

if TYPE_CHECKING:
    from operators.runtime import ProcessServices


@dataclass(frozen=True)
class Seen:
    """What the index keeps of an instance: enough to say which identity it holds, and since when."""

    entity: str
    created: str
    identity: str | None
    """`status.identity` (what the instance took), else None: then the spec's attribute counts."""
    attributes: Mapping[str, Any]
    deleted: bool

    def value(self, attribute: str) -> str | None:
        """The identity value it holds when `attribute` is the entity's identity (as `World.list_others` reads
        it: the status's, else the spec's)."""
        if self.identity:
            return self.identity
        found = self.attributes.get(attribute)
        return None if found is None else str(found)


def seen(body: Mapping[str, Any]) -> Seen:
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    attributes = spec.get("attributes")
    return Seen(entity=str(spec.get("entity") or ""), created=str(meta.get("creationTimestamp") or ""),
                identity=str(status["identity"]) if status.get("identity") else None,
                attributes=dict(attributes) if isinstance(attributes, Mapping) else {},
                deleted=bool(status.get("deleted")))


Holders = dict[str, set[str]]
"""identity value -> names of the instances that hold it."""


class Identities:
    """A tap of the ServiceInstance watch: per namespace, each instance's `Seen`, and per (namespace, entity,
    identity attribute) asked for once, the holders of each value, kept current from then on."""

    def __init__(self, watch: Watch | None = None) -> None:
        self.watch = watch
        self._seen: dict[str, dict[str, Seen]] = {}  # namespace -> name -> Seen
        self._holders: dict[tuple[str, str, str], Holders] = {}  # (namespace, entity, attribute) -> holders

    # --- following the watch ------------------------------------------------------------------------

    def __call__(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        instances = self._seen.setdefault(namespace, {})
        old = instances.pop(name, None)
        new = None if event_type == "DELETED" else seen(body)
        if new is not None:
            instances[name] = new
        for (where, entity, attribute), holders in self._holders.items():
            if where != namespace:
                continue
            if old is not None and old.entity == entity:
                _drop(holders, old.value(attribute), name)
            if new is not None and new.entity == entity:
                _add(holders, new.value(attribute), name)

    @property
    def in_sync(self) -> bool:
        """Whether the index holds what the API server holds (but for the milliseconds an event takes)."""
        return self.watch is not None and self.watch.in_sync

    # --- reading ------------------------------------------------------------------------------------

    def others(self, namespace: str, entity: str, attribute: str, instance: str, *, tie_break: bool
               ) -> Mapping[str, str]:
        """As `World.list_others`: identity value -> the oldest other instance of `entity` (not deleted)
        that holds it; with `tie_break`, only instances created before `instance`."""
        key = (namespace, entity, attribute)
        holders = self._holders.get(key)
        instances = self._seen.get(namespace, {})
        if holders is None:
            holders = self._holders[key] = {}
            for name, item in instances.items():
                if item.entity == entity:
                    _add(holders, item.value(attribute), name)
        me = instances.get(instance)
        mine = (me.created, instance) if tie_break and me is not None else None
        return _Others(instances, holders, instance, mine)


def _add(holders: Holders, value: str | None, name: str) -> None:
    if value is not None:
        holders.setdefault(value, set()).add(name)


def _drop(holders: Holders, value: str | None, name: str) -> None:
    if value is not None and value in holders:
        holders[value].discard(name)
        if not holders[value]:
            del holders[value]


class _Others(Mapping[str, str]):
    """The other instances' identities, looked up one value at a time (what the engine does: `get`)."""

    def __init__(self, instances: Mapping[str, Seen], holders: Holders, instance: str,
                 mine: tuple[str, str] | None) -> None:
        self._instances, self._holders, self._instance, self._mine = instances, holders, instance, mine

    def __getitem__(self, value: str) -> str:
        ages = []
        for name in self._holders.get(value, ()):
            item = self._instances.get(name)
            if item is None or name == self._instance or item.deleted:
                continue
            if self._mine is not None and (item.created, name) >= self._mine:
                continue
            ages.append((item.created, name))
        if not ages:
            raise KeyError(value)
        return min(ages)[1]

    def __iter__(self) -> Iterator[str]:
        return (value for value in list(self._holders) if value in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def index_of(services: object) -> Identities | None:
    """The index tapping the operator's watch of every ServiceInstance, when `services` has one (the
    operator's steps and admission; not the inventory API, nor an operator with sharding or `--namespace`)."""
    watches = getattr(services, "watches", None)
    watch = watches.get(SERVICE_INSTANCE.plural) if isinstance(watches, Mapping) else None
    if not isinstance(watch, Watch):
        return None
    return next((tap for tap in watch.taps if isinstance(tap, Identities)), None)


class IdentityIndex:
    """The addon that puts an `Identities` on the watch of every ServiceInstance, before the watches start
    (a tap added later would miss the first listing)."""

    name = "lsm-identities"

    async def start(self, services: ProcessServices) -> None:
        watch = services.watches.get(SERVICE_INSTANCE.plural)
        if watch is not None:
            watch.add_tap(Identities(watch))

    async def stop(self) -> None:
        return None
