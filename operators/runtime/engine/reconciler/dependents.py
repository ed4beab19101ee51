"""Dependents: when an object's change must reach the objects that refer to it, and which they are.

A kind declares what it refers to (`Kind.depends_on`: by name, or by a test of its spec). When an
object comes to rest in a new way, stops being Ready, or goes, the reconcilers of the kinds that
refer to it recheck their referrers (`Reconciler.recheck_referrers`, linked by the process:
`operators.runtime.process`). What is decided here reads the objects' `table.Tracked` records;
the rechecks themselves are reconciles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from operators.runtime.core import conditions as cond
from operators.runtime.core.kinds import Kind, named_after
from operators.runtime.core.pipeline import Observed
from operators.runtime.core.store import object_key
from operators.runtime.engine.reconciler.table import UNSEEN, ObjectTable, Settled, observed_project


def settled(obj: Observed) -> Settled:
    """Where an object came to rest: (Ready or Stalled, the generation), or None while it is on its way
    (what its dependents wait for: an App that reached its goal, or failed and waits for its user)."""
    conditions = obj.status.get("conditions") or []
    for verdict in (cond.READY, cond.STALLED):
        if cond.is_true(conditions, verdict):
            return verdict, int(obj.status.get("observedGeneration") or 0)
    return None


def moved(table: ObjectTable, event_type: str | None, key: str, obj: Observed) -> bool:
    """Record where `obj` is now; True when its dependents must be told: it came to rest in a new way
    (Ready or Stalled at a new generation), stopped being Ready, or went (whatever it was doing).

    Every object this replica receives is tracked, owned or not (with several replicas it
    receives the objects of its buckets: those of its projects, and of projects on their way
    to or from it). A listing (`None`) only records: a restart must not re-check everything
    that refers to something. Leaving Stalled (a retry) or going between two states
    of unrest tells nobody: nothing has come of it yet.
    """
    record = table.record(key)
    before = record.settled
    if event_type == "DELETED":
        record.settled = UNSEEN
        table.tidy(key)
        return True
    now = record.settled = settled(obj)
    if event_type is None:
        return False
    was_ready = isinstance(before, tuple) and before[0] == cond.READY
    return not (before == now or (now is None and not was_ready))


def referrers(table: ObjectTable, kind: Kind, of_kind: str, namespace: str, name: str,
              owns: Callable[[str], bool]) -> Iterator[tuple[str, Observed]]:
    """The owned objects of `kind` (as observed when asked) that refer to `of_kind` `name` (in `namespace`;
    in every namespace when that object is cluster-scoped, `namespace` ""), but those on their way
    out. Lazy: each one is tested when the one before it has been rechecked."""
    refers = kind.depends_on.get(of_kind)
    if refers is None:
        return
    if refers is named_after and namespace:
        # the one object of that name in that namespace, looked up: a scan of every object of the kind per
        # change made each App's Ready cost O(instances) (issue 31, item 9: +29% operator CPU per trigger
        # beside 2,000 instances)
        key = object_key(kind.kind, namespace, name)
        record = table.get(key)
        seen = [(key, record.seen)] if record is not None and record.seen is not None else []
    else:
        # a namespaced object's referrers are in its namespace, which the table indexes: no test of each spec
        # of every namespace (beside 2,000 instances of another namespace, a relation test of each cost ~5 ms
        # per change, and even a pass over their keys was 7% of the operator's samples)
        records = table.in_namespace(namespace) if namespace else table.items()
        seen = [(key, record.seen) for key, record in records if record.seen is not None]
    for key, obj in seen:
        if kind.kind == of_kind and obj.name == name and obj.namespace == namespace:
            continue  # an object never depends on itself (a kind that refers to its own kind)
        matches = obj.name == name if refers is named_after else refers(obj.spec, name)
        if namespace in ("", obj.namespace) and not obj.deleting and matches and owns(observed_project(obj)):
            yield key, obj
