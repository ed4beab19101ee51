"""How many workflow runs an operator runs at once, and who goes next.

Each run is a runner process of ~50 MiB: without a bound, the number of runs follows how fast
objects arrive (21-31 were seen in a burst of 300 Apps) and a burst of a few thousand would exhaust
the pod's memory. Runs beyond the bound wait, visibly (the kind shows them Queued), and are let in
fairly: the next slot goes to the namespace with the fewest runs in progress, and within a
namespace to the run that has waited longest, so one tenant's burst does not starve the others.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from pathlib import Path

RUN_MEMORY_BYTES = 64 * 2**20
"""What one run is reckoned to cost (a runner process measured at ~50 MiB, and its scripts)."""
MIN_DEFAULT_RUNS, MAX_DEFAULT_RUNS = 2, 64


def default_limit(cgroup: Path = Path("/sys/fs/cgroup/memory.max")) -> int:
    """Runs at once by default: half of the memory this process may use (its cgroup's limit, or
    the machine's memory) at `RUN_MEMORY_BYTES` per run, between 2 and 64."""
    memory: int | None = None
    try:
        text = cgroup.read_text().strip()
        if text != "max":
            memory = int(text)
    except (OSError, ValueError):
        pass
    if memory is None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            return MIN_DEFAULT_RUNS
    return max(MIN_DEFAULT_RUNS, min(MAX_DEFAULT_RUNS, memory // 2 // RUN_MEMORY_BYTES))


Queued = Callable[[int, int], Awaitable[None]]
"""Told, when a run has to wait, how many runs are ahead of it and how many are running."""


class RunSlots:
    """At most `limit` runs at once; the others wait in per-namespace queues."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"at least one run at a time: got {limit}")
        self.limit = limit
        self._running: Counter[str] = Counter()
        self._waiting: dict[str, deque[tuple[int, asyncio.Future[None]]]] = {}
        self._order = itertools.count()

    @property
    def running(self) -> int:
        return sum(self._running.values())

    @property
    def queued(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    async def acquire(self, namespace: str, queued: Queued | None = None, *, at_once: bool = False) -> None:
        """Take a slot for a run of `namespace`, waiting for one if none is free. `at_once`: a run
        already in progress (a runner still alive after an operator restart) counts without
        waiting, even beyond the limit, since stopping it would lose work."""
        if at_once or (self.running < self.limit and not self.queued):
            self._running[namespace] += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (next(self._order), future)
        self._waiting.setdefault(namespace, deque()).append(entry)
        try:
            if queued is not None:
                await queued(self.queued - 1, self.running)
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(namespace)  # granted while it was being cancelled: give it back
            else:
                self._forget(namespace, entry)
            raise

    def release(self, namespace: str) -> None:
        self._running[namespace] -= 1
        if self._running[namespace] <= 0:
            del self._running[namespace]
        self._grant()

    def _grant(self) -> None:
        while self.running < self.limit and self._waiting:
            namespace = min(self._waiting, key=lambda ns: (self._running[ns], self._waiting[ns][0][0]))
            queue = self._waiting[namespace]
            _, future = queue.popleft()
            if not queue:
                del self._waiting[namespace]
            if not future.done():
                self._running[namespace] += 1
                future.set_result(None)

    def _forget(self, namespace: str, entry: tuple[int, asyncio.Future[None]]) -> None:
        queue = self._waiting.get(namespace)
        if queue is not None and entry in queue:
            queue.remove(entry)
            if not queue:
                del self._waiting[namespace]
