"""An API-server outage: told apart from the object's own faults, waited out with one probe, and
every waiting object resumed as soon as the server answers (no per-object exponential backoff)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from operators.environment import KIND
from operators.runtime.core.pipeline import Pipeline, StepContext
from operators.runtime.engine.outage import ApiHealth
from operators.runtime.engine.reconciler import Backoff
from operators.runtime.kube.client import ApiError, ApiUnreachable, ClusterAccess, KubeClient, is_outage
from tests.unit.runtime.test_reconciler import body, make


def test_outages_are_told_apart_from_the_objects_own_errors() -> None:
    assert is_outage(ApiUnreachable("GET /x: API server unreachable: Connection refused"))
    assert is_outage(ApiError(503, "etcd unavailable")) and is_outage(ApiError(504, "timeout"))
    assert not is_outage(ApiError(404, "not found")) and not is_outage(ApiError(422, "invalid"))
    try:
        try:
            raise ApiUnreachable("refused")
        except ApiError:
            raise RuntimeError("CreateRunNotStarted") from None  # a step's own error, raised while handling it
    except RuntimeError as wrapped:
        assert is_outage(wrapped)


def test_the_client_names_what_failed_when_the_server_does_not_answer() -> None:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (in the kernel) and never answers

    async def call(sock: socket.socket) -> ApiError:
        access = ClusterAccess(f"http://127.0.0.1:{sock.getsockname()[1]}", ssl.create_default_context())
        async with KubeClient(access, timeout=0.3) as kube:
            with pytest.raises(ApiError) as failed:
                await kube.request("GET", "/version")
        return failed.value

    try:
        first, second = asyncio.run(call(refused)), asyncio.run(call(silent))
    finally:
        refused.close()
        silent.close()
    assert isinstance(first, ApiUnreachable) and "GET /version: API server unreachable: " in first.message
    assert "refused" in first.message.lower() or "connect" in first.message.lower()
    assert isinstance(second, ApiUnreachable)
    assert second.message == "GET /version: no answer from the API server within 0.3s"  # never an empty reason


def test_one_probe_however_many_report_and_waiters_resume_when_it_answers() -> None:
    probes: list[int] = []

    async def probe() -> object:
        probes.append(1)
        if len(probes) < 3:
            raise ApiUnreachable("refused")
        return {"major": "1"}

    async def scenario() -> None:
        health = ApiHealth(probe, interval=0.01)
        for _ in range(50):
            health.report(ApiUnreachable("refused"))
        assert not health.up and health.outages == 1
        await asyncio.wait_for(health.wait_up(), 5)
        assert health.up
        await health.close()

    asyncio.run(scenario())
    assert len(probes) == 3


def test_an_answer_that_is_an_error_still_ends_the_outage() -> None:
    async def forbidden() -> object:
        raise ApiError(403, "forbidden")  # the server answers: it is back

    async def scenario() -> bool:
        health = ApiHealth(forbidden, interval=0.01)
        health.report(ApiUnreachable("refused"))
        await asyncio.wait_for(health.wait_up(), 5)
        return health.up

    assert asyncio.run(scenario())


def test_an_object_failing_on_an_outage_resumes_when_the_server_answers_not_after_its_backoff(tmp_path: Path) -> None:
    server_up = asyncio.Event()
    calls: list[int] = []

    async def step(ctx: StepContext) -> Mapping[str, Any]:
        calls.append(1)
        if not server_up.is_set():
            raise ApiUnreachable("GET /apis/x: API server unreachable: Connection refused")
        return {}

    async def probe() -> object:
        if not server_up.is_set():
            raise ApiUnreachable("refused")
        return {}

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": step}))
    rec, writer, _, _ = make(tmp_path, kind=kind, backoff=Backoff(base=600.0, cap=600.0))  # a retry would never come

    async def scenario() -> None:
        rec._health = health = ApiHealth(probe, interval=0.01)
        await rec.on_event("ADDED", body())
        assert calls == [1] and not health.up and rec.retries_pending() == 1
        server_up.set()
        for _ in range(500):
            if writer.patches and writer.patches[-1][1].get("phase") == "Provisioned":
                break
            await asyncio.sleep(0.01)
        await health.close()

    asyncio.run(scenario())
    assert calls == [1, 1] and writer.patches[-1][1]["phase"] == "Provisioned"
    assert rec._metrics.value("stead_outage_waits_total", kind="Environment") == 1
    assert rec._metrics.value("stead_retries_total", kind="Environment") == 0
