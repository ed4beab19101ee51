"""Answers of the API server's reviews (TokenReview, SubjectAccessReview, a Secret read), kept a
few seconds, refreshed before they expire, and fetched once however many requests want them.

A Hiera backend sends a hundred concurrent lookups with one token. With a plain time-to-live
cache, every `ttl` seconds all of them miss together and each asks the API server for the
same review: a hundred TokenReviews, and a hundred requests stalled behind them (the API's p99
went from about 13 ms to over 50 ms in a benchmark run that crossed one expiry). Here:

- concurrent misses of one key share one fetch (a request that gives up does not cancel it
  for the others);
- a value older than `refresh` but younger than `ttl` is returned at once while one fetch
  renews it in the background, so a steadily used key never makes a request wait;
- nothing older than `ttl` is ever returned: revoking a token or a RoleBinding takes effect
  within `ttl`, as with the kube-apiserver's own webhook caches;
- a failed background renewal keeps the old value until `ttl` (the next miss fetches in the
  foreground and reports the failure to its caller).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

V = TypeVar("V")


class ReviewCache(Generic[V]):
    """Values by key, each at most `ttl` seconds old; see the module's docstring."""

    def __init__(self, ttl: float, refresh: float | None = None, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.refresh = ttl * 0.75 if refresh is None else refresh
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[Hashable, tuple[float, V]] = {}
        self._fetching: dict[Hashable, asyncio.Future[V]] = {}

    def holds(self, key: Hashable) -> bool:
        """Whether a value of `key` is kept and not older than `ttl` (or being fetched)."""
        held = self._entries.get(key)
        return key in self._fetching or (held is not None and self._clock() - held[0] <= self.ttl)

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> V:
        """The value of `key`, from the cache when fresh enough, else from one shared `fetch()`."""
        held = self._entries.get(key)
        if held is not None:
            age = self._clock() - held[0]
            if age <= self.ttl:
                if age > self.refresh and key not in self._fetching:
                    self._start(key, fetch)  # renew in the background; this request does not wait
                return held[1]
        pending = self._fetching.get(key)
        if pending is None:
            pending = self._start(key, fetch)
        return await asyncio.shield(pending)

    def _start(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> asyncio.Future[V]:
        started = self._clock()

        async def fetch_and_keep() -> V:
            value = await fetch()
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # crude, but bounded: a flood of bad tokens cannot grow memory
            self._entries[key] = (started, value)  # aged from the request, not the answer
            return value

        task = asyncio.ensure_future(fetch_and_keep())
        self._fetching[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))
        return task

    def _finished(self, key: Hashable, task: asyncio.Future[V]) -> None:
        if self._fetching.get(key) is task:
            del self._fetching[key]
        if not task.cancelled() and task.exception() is not None:
            # retrieved here so a renewal nobody awaited is not reported as a lost exception;
            # whoever awaited it got the exception itself
            log.debug("review fetch failed: %s", type(task.exception()).__name__)
