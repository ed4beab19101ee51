"""Ownership of projects: a consistent hash ring with virtual nodes over the live replicas.

A project (label `stead.dev/project`, else the namespace) is handled by exactly one replica,
so that everything of one project is local to one process and its store. Membership is an
interface: a static set today (one replica owns everything), Leases in a later issue. Adding
or removing one replica moves only about 1/N of the projects, which is why a ring and not
`hash % N`.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

PROJECT_LABEL = "stead.dev/project"


def project_of(body: Mapping[str, Any]) -> str:
    """The project key of an object: its `stead.dev/project` label, else its namespace."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    return str(labels.get(PROJECT_LABEL) or meta.get("namespace") or "")


def _point(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing with `vnodes` points per member."""

    def __init__(self, members: Iterable[str], vnodes: int = 128) -> None:
        self.members = frozenset(members)
        self.vnodes = vnodes
        points = sorted((_point(f"{m}#{i}"), m) for m in self.members for i in range(vnodes))
        self._hashes = [h for h, _ in points]
        self._owners = [m for _, m in points]

    def owner(self, key: str) -> str | None:
        """The member owning `key`, or None for an empty ring."""
        if not self._hashes:
            return None
        index = bisect.bisect(self._hashes, _point(key)) % len(self._hashes)
        return self._owners[index]


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

    def __init__(self, replica: str, membership: Membership, vnodes: int = 128) -> None:
        self.replica = replica
        self._membership = membership
        self._vnodes = vnodes
        self._ring = HashRing(membership.members(), vnodes)

    def refresh(self) -> bool:
        """Rebuild the ring if membership changed; True when it did (the caller re-lists and adopts)."""
        members = self._membership.members()
        if members == self._ring.members:
            return False
        self._ring = HashRing(members, self._vnodes)
        return True

    def owns(self, project: str) -> bool:
        return self._ring.owner(project) == self.replica
