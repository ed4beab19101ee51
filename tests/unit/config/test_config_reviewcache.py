"""The review cache: one fetch for concurrent misses, renewal ahead of expiry, nothing older than the ttl."""

from __future__ import annotations

import asyncio

import pytest

from operators.runtime.api.reviewcache import ReviewCache


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class Reviewer:
    """Answers `answer` after `gate` opens; counts the fetches."""

    def __init__(self) -> None:
        self.fetches = 0
        self.answer = "first"
        self.fail = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def fetch(self) -> str:
        self.fetches += 1
        await self.gate.wait()
        if self.fail:
            raise OSError("API server unreachable")
        return self.answer


def test_concurrent_misses_share_one_fetch() -> None:
    async def scenario() -> None:
        cache: ReviewCache[str] = ReviewCache(ttl=10, clock=Clock())
        reviewer = Reviewer()
        reviewer.gate.clear()
        waiting = [asyncio.create_task(cache.get("token", reviewer.fetch)) for _ in range(100)]
        await asyncio.sleep(0)
        reviewer.gate.set()
        assert await asyncio.gather(*waiting) == ["first"] * 100
        assert reviewer.fetches == 1

    asyncio.run(scenario())


def test_a_value_past_refresh_is_served_at_once_and_renewed_once_in_the_background() -> None:
    async def scenario() -> None:
        clock = Clock()
        cache: ReviewCache[str] = ReviewCache(ttl=10, refresh=5, clock=clock)
        reviewer = Reviewer()
        assert await cache.get("token", reviewer.fetch) == "first"
        clock.now = 6
        reviewer.answer = "second"
        reviewer.gate.clear()  # the renewal hangs: the callers must not
        assert [await cache.get("token", reviewer.fetch) for _ in range(10)] == ["first"] * 10
        await asyncio.sleep(0)  # the renewal starts
        assert reviewer.fetches == 2  # one renewal for the ten
        reviewer.gate.set()
        await asyncio.sleep(0.01)
        assert await cache.get("token", reviewer.fetch) == "second" and reviewer.fetches == 2

    asyncio.run(scenario())


def test_nothing_older_than_the_ttl_is_returned() -> None:
    async def scenario() -> None:
        clock = Clock()
        cache: ReviewCache[str] = ReviewCache(ttl=10, clock=clock)
        reviewer = Reviewer()
        await cache.get("token", reviewer.fetch)
        clock.now = 10.5
        reviewer.answer = "revoked"
        assert await cache.get("token", reviewer.fetch) == "revoked"
        assert reviewer.fetches == 2

    asyncio.run(scenario())


def test_a_failed_renewal_keeps_the_value_until_the_ttl_then_the_caller_sees_the_failure() -> None:
    async def scenario() -> None:
        clock = Clock()
        cache: ReviewCache[str] = ReviewCache(ttl=10, refresh=5, clock=clock)
        reviewer = Reviewer()
        await cache.get("token", reviewer.fetch)
        reviewer.fail = True
        clock.now = 6
        assert await cache.get("token", reviewer.fetch) == "first"
        await asyncio.sleep(0.01)  # the renewal fails in the background
        assert await cache.get("token", reviewer.fetch) == "first"
        clock.now = 11
        with pytest.raises(OSError):
            await cache.get("token", reviewer.fetch)

    asyncio.run(scenario())


def test_a_caller_that_gives_up_does_not_cancel_the_fetch_for_the_others() -> None:
    async def scenario() -> None:
        cache: ReviewCache[str] = ReviewCache(ttl=10, clock=Clock())
        reviewer = Reviewer()
        reviewer.gate.clear()
        impatient = asyncio.create_task(cache.get("token", reviewer.fetch))
        patient = asyncio.create_task(cache.get("token", reviewer.fetch))
        await asyncio.sleep(0)
        impatient.cancel()
        reviewer.gate.set()
        assert await patient == "first" and reviewer.fetches == 1

    asyncio.run(scenario())


def test_entries_are_bounded() -> None:
    async def scenario() -> None:
        cache: ReviewCache[str] = ReviewCache(ttl=10, max_entries=3, clock=Clock())
        reviewer = Reviewer()
        for key in range(10):
            await cache.get(key, reviewer.fetch)
        assert len(cache._entries) <= 3

    asyncio.run(scenario())
