"""A controllable clock pair for the shard tests: one monotonic, one wall, moving together."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec

import pytest

P = ParamSpec("P")


class FakeTime:
    """`mono()` and `wall()` advance together by `advance`; `wall_offset` models a skewed clock."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.start = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)

    def mono(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return self.start + timedelta(seconds=self.t - 1000.0)

    def skewed(self, offset: float) -> FakeTime:
        """Another machine's clocks: the same instant, its wall clock `offset` seconds off."""
        other = FakeTime()
        other.start = self.start + timedelta(seconds=offset)
        other.t = self.t
        return other

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


def sync(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async test body in a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run
