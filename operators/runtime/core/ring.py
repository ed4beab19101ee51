"""Ownership of projects: a consistent hash ring with virtual nodes over the live replicas.

A project (label `stead.dev/project`, else the namespace) is handled by exactly one replica,
so that everything of one project is local to one process and its store. Membership is an
interface: a static set today (one replica owns everything), Leases in a later issue. Adding
or removing one replica moves only about 1/N of the projects, which is why a ring and not
`hash % N`.

Why virtual nodes: with one point per replica the arcs are very unequal; with `vnodes` points each
the busiest replica's share approaches the statistical floor (`bench/scale_out.py`: 256 points give
max/mean 1.11 for 3 replicas over 10,000 projects, 1.29 for 100 replicas, where the Poisson noise of
100 projects per replica alone is ~1.25). Why xxh3_64 and not Python's `hash()`: every replica must
compute the same ring, across processes, restarts and versions; `hash()` of a string is salted per
process. The ring is advice only: with several replicas, actual ownership is a claim written with
compare-and-swap (`operators.runtime.shard`).

`BoundedRing` is the same ring with bounded loads (Mirrokni, Thorup and Zadimoghaddam, "Consistent
Hashing with Bounded Loads", as Argo CD offers it): over a known set of keys, no member holds more
than ceil((1 + epsilon) x mean) of them, at the price of more keys moving when membership changes.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import xxhash

PROJECT_LABEL = "stead.dev/project"


def project_key(labels: Mapping[str, str], namespace: str) -> str:
    """The project of an object with these labels in this namespace: its `stead.dev/project` label, else
    its namespace (the one rule, for bodies and for observed objects alike)."""
    return str(labels.get(PROJECT_LABEL) or namespace or "")


def project_of(body: Mapping[str, Any]) -> str:
    """The project key of an object's body (see `project_key`)."""
    meta = body.get("metadata") or {}
    return project_key(meta.get("labels") or {}, str(meta.get("namespace") or ""))


DEFAULT_VNODES = 256


def point(value: str) -> int:
    """A stable 64-bit position on the ring (xxh3_64, seed 0, of the UTF-8 bytes)."""
    return xxhash.xxh3_64_intdigest(value.encode())


class Ring:
    """Immutable: membership changes build a new ring (cheap: 100 members x 256 points in ~30 ms)."""

    __slots__ = ("_hashes", "_owners", "members", "vnodes")

    def __init__(self, members: Iterable[str], vnodes: int = DEFAULT_VNODES) -> None:
        if vnodes < 1:
            raise ValueError("a ring needs at least one virtual node per member")
        self.members = frozenset(members)
        self.vnodes = vnodes
        # ties between two members' points (2^-64 each) are broken by the member id: still deterministic
        points = sorted((point(f"{member}#{i}"), member) for member in self.members for i in range(vnodes))
        self._hashes = [h for h, _ in points]
        self._owners = [m for _, m in points]

    def owner(self, project: str) -> str | None:
        """The member whose next point clockwise follows the project's hash; None for an empty ring."""
        if not self._hashes:
            return None
        index = bisect.bisect_right(self._hashes, point(project))
        return self._owners[index if index < len(self._owners) else 0]

    def owners(self, projects: Iterable[str]) -> dict[str, str | None]:
        return {project: self.owner(project) for project in projects}

    def balance(self, projects: Iterable[str]) -> Balance:
        return balance_of(self, projects)

    def __repr__(self) -> str:
        return f"Ring({sorted(self.members)!r}, vnodes={self.vnodes})"


class Placement(Protocol):
    """Who should own a key, over a fixed set of members: `Ring`, or `BoundedRing`."""

    @property
    def members(self) -> frozenset[str]: ...

    def owner(self, key: str) -> str | None: ...


DEFAULT_EPSILON = 0.05
"""`BoundedRing`'s slack over the mean (`--placement-epsilon`). Not the paper's 0.25: with 256 virtual
nodes the plain ring's busiest of 2-100 replicas already holds less than 1.25x the mean of 4,096 buckets,
so 0.25 bounds nothing; 0.05 bounds it, at the price of more buckets moved per change of replicas
as replicas grow many (`bench/scale_out.py` prints both, docs/operations.md keeps them)."""


class BoundedRing:
    """Consistent hashing with bounded loads over a known, fixed set of `keys`.

    Each key, in a fixed order (by its point on the ring, then by name), walks clockwise from its
    point to the first member whose load (the sum of the weights it holds so far) is below the
    capacity ceil((1 + epsilon) x total weight / members). With unit weights no member holds more
    than the capacity, and every key finds one (the capacities add up to more than the keys); with
    weights a member may exceed it by less than the heaviest key's weight.

    Deterministic: the owners are a pure function of (members, vnodes, keys, weights, epsilon), so
    every replica that sees the same inputs computes the same placement, as with `Ring`. It needs
    the whole key set, which is why Stead places its fixed 4,096 assignment buckets with it
    (`operators.runtime.shard.ring.bucket_keys`), never the projects (no replica sees them all).
    A key outside `keys` gets the plain ring's owner.
    """

    __slots__ = ("_owners", "capacity", "epsilon", "ring")

    def __init__(self, members: Iterable[str], keys: Iterable[str], epsilon: float = DEFAULT_EPSILON,
                 vnodes: int = DEFAULT_VNODES, weights: Mapping[str, int] | None = None) -> None:
        if not epsilon > 0:
            raise ValueError("epsilon must be above 0 (the bound is (1 + epsilon) x the mean)")
        self.ring = Ring(members, vnodes)
        self.epsilon = epsilon
        ordered = sorted((point(key), key) for key in set(keys))
        weight = {key: 1 if weights is None else max(0, int(weights.get(key, 0))) for _, key in ordered}
        members_n = len(self.ring.members)
        self.capacity = math.ceil((1 + epsilon) * sum(weight.values()) / members_n) if members_n else 0
        self._owners: dict[str, str] = {}
        if not members_n:
            return
        hashes, owners = self.ring._hashes, self.ring._owners  # the same ring's points
        load = dict.fromkeys(self.ring.members, 0)
        for at, key in ordered:
            index = bisect.bisect_right(hashes, at)
            for step in range(len(owners)):
                member = owners[(index + step) % len(owners)]
                if load[member] < self.capacity:
                    break
            else:  # only with all weights 0 (capacity 0): the plain ring's owner
                member = owners[index % len(owners)]
            load[member] += weight[key]
            self._owners[key] = member

    @property
    def members(self) -> frozenset[str]:
        return self.ring.members

    @property
    def vnodes(self) -> int:
        return self.ring.vnodes

    def owner(self, key: str) -> str | None:
        found = self._owners.get(key)
        return found if found is not None else self.ring.owner(key)

    def owners(self, projects: Iterable[str]) -> dict[str, str | None]:
        return {project: self.owner(project) for project in projects}

    def balance(self, projects: Iterable[str]) -> Balance:
        return balance_of(self, projects)

    def __repr__(self) -> str:
        return (f"BoundedRing({sorted(self.members)!r}, {len(self._owners)} keys, epsilon={self.epsilon}, "
                f"vnodes={self.vnodes})")


@dataclass(frozen=True)
class Balance:
    """Projects per member, and the figures the issue asks for."""

    counts: dict[str, int]

    @property
    def mean(self) -> float:
        return sum(self.counts.values()) / len(self.counts) if self.counts else 0.0

    @property
    def max_over_mean(self) -> float:
        """The busiest member's load relative to a perfect split (1.0 is perfect)."""
        mean = self.mean
        return max(self.counts.values()) / mean if mean else 1.0

    @property
    def effective_replicas(self) -> float:
        """N / (max/mean): how many replicas' worth of parallelism the split allows, since the
        busiest replica finishes last (N is perfect)."""
        return len(self.counts) / self.max_over_mean if self.counts else 0.0


def balance_of(placement: Placement, projects: Iterable[str]) -> Balance:
    """How evenly `projects` spread over the members (members owning none count as 0)."""
    counts = Counter({member: 0 for member in placement.members})
    counts.update(owner for owner in map(placement.owner, projects) if owner is not None)
    return Balance(dict(counts))


def moved_fraction(before: Placement, after: Placement, projects: Iterable[str]) -> float:
    """The fraction of `projects` whose owner differs between two rings (each move is a hand-over)."""
    keys = list(projects)
    if not keys:
        return 0.0
    return sum(1 for p in keys if before.owner(p) != after.owner(p)) / len(keys)


class Membership(Protocol):
    """Who the live replicas are. Implementations: static now, Lease-based later."""

    def members(self) -> frozenset[str]: ...


class StaticMembership:
    """A fixed set of replicas (one replica: it owns everything)."""

    def __init__(self, members: Iterable[str]) -> None:
        self._members = frozenset(members)

    def members(self) -> frozenset[str]:
        return self._members


class Ownership:
    """Answers "is this project mine?" for one replica; every handler asks before touching an object."""

    def __init__(self, replica: str, membership: Membership, vnodes: int = DEFAULT_VNODES) -> None:
        self.replica = replica
        self._membership = membership
        self._vnodes = vnodes
        self._ring = Ring(membership.members(), vnodes)

    def refresh(self) -> bool:
        """Rebuild the ring if membership changed; True when it did (the caller re-lists and adopts)."""
        members = self._membership.members()
        if members == self._ring.members:
            return False
        self._ring = Ring(members, self._vnodes)
        return True

    def owns(self, project: str) -> bool:
        return self._ring.owner(project) == self.replica
