"""The one clock format of Stead's objects: RFC 3339 in UTC to the second, as Kubernetes writes
its own timestamps (creationTimestamp, lastTransitionTime)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_seconds(stamp: str) -> str:
    """Another clock's RFC 3339 time (a runner's, to the millisecond, any offset) in this format."""
    return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
