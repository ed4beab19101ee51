"""The ring's use for sharding: bucket labels that let the API server filter each replica's watches.

The ring itself (`Ring`, `point`, `Balance`, `moved_fraction`) is `operators.runtime.core.ring`'s, which
says why a ring, why virtual nodes and why xxh3; it is re-exported here for the shard's callers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from operators.runtime.core.ring import (
    DEFAULT_EPSILON,
    DEFAULT_VNODES,
    Balance,
    BoundedRing,
    Placement,
    Ring,
    moved_fraction,
    point,
    project_key,
)

__all__ = ["BUCKET_LABEL", "CLUSTER_PROJECT", "DEFAULT_BUCKETS", "DEFAULT_EPSILON", "DEFAULT_VNODES", "PLACEMENTS",
           "Balance", "BoundedRing", "Placement", "Ring", "bucket_keys", "bucket_label", "bucket_of", "bucket_selector",
           "buckets_of", "by_bucket", "layout", "moved_fraction", "point"]

CLUSTER_PROJECT = "stead-cluster-scoped"
"""The project of cluster-scoped objects (they have no namespace): one replica handles them all."""

BUCKET_LABEL = "stead.dev/shard-bucket"
DEFAULT_BUCKETS = 4096


def bucket_of(project: str, buckets: int = DEFAULT_BUCKETS) -> int:
    """A fixed bucket of the project's hash, for an assignment label on its objects.

    Why: Kopf's watches cannot filter on the API server, and one watch per owned project and kind
    does not scale (10,000 projects x 9 kinds). A label that is a pure function of the project
    (set once, by the mutating webhook) lets each replica watch each kind with one selector,
    `stead.dev/shard-bucket in (...)`; a hand-over changes the selector, never the objects (a
    label naming the *replica* would cost one write per object per move).

    It filters only if whole buckets are placed together: place projects on the ring by their
    bucket (`by_bucket`), not by name. Placed by name, 3 replicas over 10,000 projects would each
    hold projects in ~75% of 4,096 buckets (and 99% of 1,024), receiving nearly everything
    (`bench/scale_out.py` prints these figures).
    """
    return point(project) % buckets


def by_bucket(buckets: int = DEFAULT_BUCKETS) -> Callable[[str], str]:
    """A placement key: the ring places the project's bucket, so a bucket has one owner."""

    def key(project: str) -> str:
        return _bucket_key(bucket_of(project, buckets))

    return key


def _bucket_key(bucket: int) -> str:
    """Where the ring places a bucket (`by_bucket`, `buckets_of`)."""
    return f"bucket-{bucket}"


def bucket_keys(buckets: int = DEFAULT_BUCKETS) -> list[str]:
    """Every bucket's placement key: the whole, fixed key set a `BoundedRing` places."""
    return [_bucket_key(b) for b in range(buckets)]


PLACEMENTS = ("ring", "bounded")


def layout(placement: str = "ring", epsilon: float = DEFAULT_EPSILON, buckets: int = DEFAULT_BUCKETS,
           vnodes: int = DEFAULT_VNODES) -> Callable[[Iterable[str]], Placement]:
    """How the coordinator builds its placement of the buckets over the live members (`--placement`).

    `bounded` places the fixed set of bucket keys with bounded loads: what every replica needs to
    compute it is the member set alone, exactly as for the plain ring (the buckets are a constant),
    so replicas that agree on membership agree on every owner. Weighting the buckets by their
    projects would need the project set, which no replica has whole (each watches only its
    buckets; the claims lag every new project), and would move buckets on every new project.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: expected one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if placement == "ring":
        return lambda members: Ring(members, vnodes)
    keys = bucket_keys(buckets)
    return lambda members: BoundedRing(members, keys, epsilon, vnodes)


def bucket_selector(buckets: Iterable[int]) -> str:
    """The label selector for objects in `buckets` (set-based; sorted for a stable watch URL)."""
    values = ",".join(str(b) for b in sorted(set(buckets)))
    return f"{BUCKET_LABEL} in ({values})"


def bucket_label(labels: Mapping[str, str], namespace: str, buckets: int = DEFAULT_BUCKETS) -> str:
    """The value of `BUCKET_LABEL` an object with these labels in this namespace must carry."""
    return str(bucket_of(project_key(labels, namespace) or CLUSTER_PROJECT, buckets))


def buckets_of(ring: Placement, member: str, buckets: int = DEFAULT_BUCKETS) -> frozenset[int]:
    """The buckets `ring` places on `member` (by `by_bucket`'s keys): what it watches."""
    return frozenset(b for b in range(buckets) if ring.owner(_bucket_key(b)) == member)
