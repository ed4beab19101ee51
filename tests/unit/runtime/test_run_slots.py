"""The bound on concurrent runs: held, fair across namespaces, and robust to cancelled waiters."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from operators.runtime.engine.slots import RUN_MEMORY_BYTES, RunSlots, default_limit


def test_the_default_follows_the_memory_the_process_may_use(tmp_path: Path) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text(str(1024 * 2**20))  # a 1 GiB pod: half of it at 64 MiB per run
    assert default_limit(limit) == 1024 * 2**20 // 2 // RUN_MEMORY_BYTES == 8
    limit.write_text(str(128 * 2**20))
    assert default_limit(limit) == 2  # never below two
    limit.write_text("max")  # no cgroup limit: the machine's memory, capped
    assert 2 <= default_limit(limit) <= 64


def test_the_bound_holds_and_the_rest_wait_in_order() -> None:
    async def scenario() -> tuple[list[str], int]:
        slots = RunSlots(2)
        order: list[str] = []
        peak = 0
        gates = {name: asyncio.Event() for name in "abcde"}

        async def run(name: str) -> None:
            nonlocal peak
            await slots.acquire("ns")
            order.append(name)
            peak = max(peak, slots.running)
            await gates[name].wait()
            slots.release("ns")

        tasks = [asyncio.create_task(run(name)) for name in "abcde"]
        await asyncio.sleep(0)
        assert slots.running == 2 and slots.queued == 3
        for name in "abcde":
            gates[name].set()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return order, peak

    order, peak = asyncio.run(scenario())
    assert peak == 2 and order == list("abcde")


def test_a_tenants_burst_does_not_starve_another_namespace() -> None:
    """200 runs of `burst` queued first, then 2 of `quiet`: quiet's get the next slots."""
    async def scenario() -> list[str]:
        slots = RunSlots(2)
        started: list[str] = []
        release = asyncio.Event()

        async def run(namespace: str) -> None:
            await slots.acquire(namespace)
            started.append(namespace)
            await release.wait()
            slots.release(namespace)

        burst = [asyncio.create_task(run("burst")) for _ in range(200)]
        await asyncio.sleep(0)
        quiet = [asyncio.create_task(run("quiet")) for _ in range(2)]
        await asyncio.sleep(0)
        assert started == ["burst", "burst"]
        slots.release("burst")  # one slot frees (a burst run ended)
        started.append("-")
        await asyncio.sleep(0)
        for task in burst + quiet:
            task.cancel()
        await asyncio.gather(*burst, *quiet, return_exceptions=True)
        return started

    assert asyncio.run(scenario())[:4] == ["burst", "burst", "-", "quiet"]


def test_waiting_is_reported_with_what_is_ahead_and_running() -> None:
    async def scenario() -> list[tuple[int, int]]:
        slots = RunSlots(1)
        told: list[tuple[int, int]] = []

        async def queued(ahead: int, running: int) -> None:
            told.append((ahead, running))

        await slots.acquire("a")
        waiters = [asyncio.create_task(slots.acquire("a", queued)) for _ in range(3)]
        await asyncio.sleep(0)
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        return told

    assert asyncio.run(scenario()) == [(0, 1), (1, 1), (2, 1)]


def test_a_cancelled_waiter_leaves_the_queue_and_a_granted_one_gives_its_slot_back() -> None:
    async def scenario() -> tuple[int, int]:
        slots = RunSlots(1)
        await slots.acquire("a")
        waiter = asyncio.create_task(slots.acquire("b"))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert slots.queued == 0
        granted = asyncio.create_task(slots.acquire("c"))
        await asyncio.sleep(0)
        slots.release("a")  # grants c's future...
        granted.cancel()  # ...which is cancelled before it ran: the slot must come back
        await asyncio.gather(granted, return_exceptions=True)
        return slots.running, slots.queued

    assert asyncio.run(scenario()) == (0, 0)


def test_a_run_in_progress_counts_at_once_even_beyond_the_limit() -> None:
    async def scenario() -> int:
        slots = RunSlots(1)
        await slots.acquire("a")
        await asyncio.wait_for(slots.acquire("a", at_once=True), 1)
        return slots.running

    assert asyncio.run(scenario()) == 2


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        RunSlots(0)
