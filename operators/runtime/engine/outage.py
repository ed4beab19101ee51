"""Work that failed because the API server did not answer waits for it to answer again.

An outage (connection refused, a timeout, 502/503/504 from the server or etcd behind it) is not
the fault of the object being reconciled, so it must not cost that object an exponential backoff:
after a two-minute outage, per-object backoff had grown to 64 s and 128 s, and Apps became Ready
100 s after the server was back. Instead, the first failure starts one probe of the server
(`GET /version`, every `interval` seconds, whatever the number of objects), every failed object
waits on it, and all resume as soon as the server answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from operators.runtime.kube.client import is_outage

log = logging.getLogger(__name__)


class ApiHealth:
    """Whether the API server answers, as far as the operator has seen."""

    def __init__(self, probe: Callable[[], Awaitable[object]], interval: float = 1.0) -> None:
        self._probe = probe
        self._interval = interval
        self._up = asyncio.Event()
        self._up.set()
        self._task: asyncio.Task[None] | None = None
        self.outages = 0

    @property
    def up(self) -> bool:
        return self._up.is_set()

    def report(self, error: BaseException) -> None:
        """An outage was seen: start probing, once, however many objects report it."""
        if not self._up.is_set():
            return
        self._up.clear()
        self.outages += 1
        log.warning("the API server does not answer (%s): waiting work resumes when it does (probed every %.0fs)",
                    error, self._interval)
        self._task = asyncio.create_task(self._probe_until_up())

    async def wait_up(self) -> None:
        await self._up.wait()

    async def _probe_until_up(self) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(self._interval)  # the probing period, not a synchronisation
            try:
                await self._probe()
            except Exception as error:
                if is_outage(error):
                    continue
                # any other answer (401, 403, 404) is an answer: the server is back
            break
        log.warning("the API server answers again after %.1fs: resuming", time.monotonic() - started)
        self._up.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
