"""Child processes that serve one port side by side, started and kept running by the operator.

Python runs one thread of a process at a time, so one process answers HTTP requests with at
most one core. An addon that must answer faster (the configuration API under a Hiera backend)
runs in N processes of its own that all listen on the same port with SO_REUSEPORT: the kernel
spreads the connections over them, and none of them shares an event loop with the reconcilers.

The protocol between the operator and a worker is deliberately small:
- the worker writes one line, `READY`, to its standard output once it is serving;
- it stops, gracefully, when its standard input reaches end of file. The operator closes it
  to stop the worker, and the kernel closes it when the operator dies however it dies (even
  SIGKILL), so a worker never outlives the operator;
- it ignores SIGINT: Ctrl-C in a terminal reaches the whole process group, and the operator
  stops its workers in order rather than have them die under it.

A worker that exits while the operator runs is started again, after a delay that doubles up
to a minute while starts keep failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

READY = b"READY\n"


class WorkerFailed(Exception):
    """A worker exited, or said nothing, before it was serving."""


@dataclass
class WorkerPool:
    """`count` processes running `command`, each told apart by `STEAD_WORKER=<index>` in its environment."""

    name: str
    command: Sequence[str]
    count: int
    ready_timeout: float = 60.0
    restart_delay: float = 1.0
    max_restart_delay: float = 60.0
    stop_timeout: float = 30.0
    _processes: dict[int, asyncio.subprocess.Process] = field(default_factory=dict, init=False, repr=False)
    _supervisors: list[asyncio.Task[None]] = field(default_factory=list, init=False, repr=False)
    restarts: int = field(default=0, init=False)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids now, in index order."""
        return [self._processes[i].pid for i in sorted(self._processes)]

    async def start(self) -> None:
        """Start every worker and return once all of them are serving (or raise `WorkerFailed`)."""
        try:
            for index in range(self.count):
                self._processes[index] = await self._spawn(index)
        except BaseException:
            await self.stop()
            raise
        self._supervisors = [asyncio.create_task(self._supervise(i), name=f"{self.name}-{i}")
                             for i in range(self.count)]

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "STEAD_WORKER": str(index)})
        assert process.stdout is not None
        try:
            async with asyncio.timeout(self.ready_timeout):
                line = await process.stdout.readline()
        except TimeoutError:
            await _end(process, grace=self.stop_timeout)
            raise WorkerFailed(f"{self.name} worker {index} was not serving after {self.ready_timeout:.0f} s"
                               ) from None
        except asyncio.CancelledError:  # the pool stops while this worker starts: it must not be left behind
            await _end(process, grace=self.stop_timeout)
            raise
        if line != READY:
            await _end(process, grace=self.stop_timeout)
            said = f"said {line!r}" if line else f"exited with code {process.returncode}"
            raise WorkerFailed(f"{self.name} worker {index} {said} before serving")
        return process

    async def _supervise(self, index: int) -> None:
        delay = self.restart_delay
        while True:
            gone = self._processes[index]
            code = await gone.wait()
            log.warning("%s worker %d (pid %d) exited with code %s; starting it again",
                        self.name, index, gone.pid, code)
            while True:
                await asyncio.sleep(delay)
                try:
                    self._processes[index] = await self._spawn(index)
                    break
                except WorkerFailed as error:
                    delay = min(delay * 2, self.max_restart_delay)
                    log.error("%s; trying again in %g s", error, delay)
            self.restarts += 1
            delay = self.restart_delay

    async def stop(self) -> None:
        """Stop supervising, then end every worker: end of input first, SIGKILL after `stop_timeout`."""
        for task in self._supervisors:
            task.cancel()
        for task in self._supervisors:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._supervisors = []
        await asyncio.gather(*(_end(p, grace=self.stop_timeout) for p in self._processes.values()))
        self._processes.clear()


async def _end(process: asyncio.subprocess.Process, grace: float) -> None:
    """End of input, then SIGKILL if the process is still there `grace` seconds later."""
    if process.stdin is not None and not process.stdin.is_closing():
        process.stdin.close()
    try:
        async with asyncio.timeout(grace):
            await process.wait()
    except TimeoutError:
        log.warning("worker pid %d did not stop within %.0f s; killing it", process.pid, grace)
        process.kill()
        await process.wait()


async def serve_until_told() -> None:
    """The worker's side, once it is serving: say READY, then return at the end of standard input
    or on SIGTERM (see the module)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loop = asyncio.get_running_loop()
    told = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, told.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        sys.stdout.buffer.write(READY)
        sys.stdout.buffer.flush()
    except BrokenPipeError:  # the operator is gone already
        return

    async def input_ends() -> None:
        while await reader.read(4096):
            pass
        told.set()

    watcher = asyncio.create_task(input_ends())
    try:
        await told.wait()
    finally:
        watcher.cancel()
        loop.remove_signal_handler(signal.SIGTERM)
