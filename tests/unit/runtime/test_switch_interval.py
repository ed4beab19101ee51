"""A process serving an `HttpServer` lets granian's thread take the GIL soon (`SWITCH_INTERVAL`):
with Python's 5 ms, each request reaching a busy event loop waited up to 5 ms to be handed over
(bench/config_lookup.py measures the tail this made)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

from operators.runtime.serving.http import SWITCH_INTERVAL, HttpServer, Request, Response, share_the_interpreter


@pytest.fixture
def interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


async def _constant(request: Request) -> Response:
    return Response(200, b"{}")


def test_starting_a_server_shortens_the_switch_interval(interval: None) -> None:
    sys.setswitchinterval(0.005)  # Python's default

    async def scenario() -> float:
        server = HttpServer(_constant)
        await server.start("127.0.0.1", 0)
        try:
            return sys.getswitchinterval()
        finally:
            await server.stop(grace=1)

    assert asyncio.run(scenario()) <= SWITCH_INTERVAL < 0.005


def test_a_shorter_interval_set_by_someone_else_is_kept(interval: None) -> None:
    sys.setswitchinterval(SWITCH_INTERVAL / 5)
    share_the_interpreter()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL / 5)
