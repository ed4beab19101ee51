"""The one clock format of Stead's objects: RFC 3339 in UTC to the second, as Kubernetes writes
its own timestamps (creationTimestamp, lastTransitionTime)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_seconds(stamp: str) -> str:
    """Another clock's RFC 3339 time (a runner's, to the millisecond, any offset) in this format."""
    return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(value: Any) -> datetime | None:
    """An RFC 3339 time as a status holds it (`Z` or an offset; none read as UTC), or None when absent or
    not a time: what the CLIs show durations from."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
