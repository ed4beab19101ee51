"""The reconciler's one record per object: an object that goes leaves nothing behind, but for the
turn still in flight, which ends by itself."""

from __future__ import annotations

import asyncio

from operators.runtime.core.pipeline import Observed
from operators.runtime.engine.reconciler.queue import Backoff, WorkQueue
from operators.runtime.engine.reconciler.table import ObjectTable


def observed(generation: int = 1) -> Observed:
    return Observed.from_body({"kind": "Environment", "metadata": {
        "namespace": "ns", "name": "e1", "uid": "u1", "generation": generation, "resourceVersion": "5"}})


def test_an_object_that_goes_mid_turn_leaves_no_record_once_the_turn_ends() -> None:
    table = ObjectTable()
    entered, gate = asyncio.Event(), asyncio.Event()
    turns: list[int] = []

    async def turn(key: str, obj: Observed) -> None:
        turns.append(obj.generation)
        entered.set()
        await gate.wait()

    queue = WorkQueue(table, "Environment", turn, backoff=Backoff(), count=lambda name: None)

    async def scenario() -> tuple[bool, int, bool]:
        record = table.record("Environment/ns/e1")
        record.project, record.seen, record.written = "ns", observed(), 5
        running = asyncio.create_task(queue.process("Environment/ns/e1", observed()))
        waiting = asyncio.create_task(queue.process("Environment/ns/e1", observed(2)))  # started second: waits
        await entered.wait()
        assert record.waiting is not None and record.waiting.generation == 2
        table.went("Environment/ns/e1")  # deleted meanwhile
        kept = table.get("Environment/ns/e1") is record  # the waiting turn is still there
        depth = queue.depth()
        gate.set()
        await running
        await waiting
        return kept, depth, table.get("Environment/ns/e1") is None

    kept, depth, gone = asyncio.run(scenario())
    assert kept and depth == 1 and gone
    assert turns == [1, 2]  # the waiting turn ran, with the freshest body, then nothing was left
