"""`/metrics` through prometheus-client: names unchanged, HELP/TYPE, histograms, queue gauges."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from operators.environment import KIND
from operators.runtime.core.pipeline import Observed, Pipeline, StepContext, TemporaryError
from operators.runtime.core.ring import Ownership, StaticMembership
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.engine.reconciler import Backoff, Reconciler
from operators.runtime.serving.http import HttpServer, Request, Response
from operators.runtime.serving.metrics import COUNTERS, HealthServer, Metrics


class Writer:
    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def add_finalizer(self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...],
                            finalizer: str) -> dict[str, Any]:
        return {}

    async def remove_finalizer(self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...],
                               finalizer: str) -> dict[str, Any]:
        return {}


class Events:
    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        pass


def body(name: str = "e1", generation: int = 1) -> dict[str, Any]:
    return {
        "kind": "Environment",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": generation},
        "spec": {"release": "r1", "nodes": [{"name": "n1", "roles": ["controller"]}]},
        "status": {},
    }


def reconciler(tmp_path: Path, metrics: Metrics, kind: Any = KIND) -> Reconciler:
    return Reconciler(kind, store=LocalStore(tmp_path / "store"),
                      ownership=Ownership("stead-0", StaticMembership(["stead-0"])), writer=Writer(),
                      events=Events(), metrics=metrics, clock=lambda: "T", backoff=Backoff(base=30.0))


def families(metrics: Metrics) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def test_counters_keep_their_exposed_names_and_labels() -> None:
    metrics = Metrics()
    metrics.inc("stead_events_posted_total")
    metrics.inc("stead_events_posted_total")
    metrics.inc("stead_status_patches_total", kind="Environment")
    metrics.inc("stead_reconcile_runs_total", 3, kind="App")
    text = metrics.render().decode()
    lines = text.splitlines()
    assert "stead_events_posted_total 2.0" in lines
    assert 'stead_status_patches_total{kind="Environment"} 1.0' in lines
    assert 'stead_reconcile_runs_total{kind="App"} 3.0' in lines
    assert metrics.value("stead_events_posted_total") == 2
    assert metrics.value("stead_status_patches_total", kind="Environment") == 1
    assert metrics.value("stead_status_patches_total", kind="App") == 0  # absent: 0, as before
    assert metrics.value("stead_never_counted_total") == 0


def test_every_metric_has_help_and_type() -> None:
    metrics = Metrics()
    metrics.inc("stead_events_dropped_total")
    metrics.inc("stead_retries_total", kind="Environment")
    text = metrics.render().decode()
    assert "# HELP stead_events_dropped_total " + COUNTERS["stead_events_dropped_total"] in text
    assert "# TYPE stead_events_dropped_total counter" in text
    assert "# TYPE stead_retries_total counter" in text
    for name, type_ in [("stead_reconcile_duration_seconds", "histogram"),
                        ("stead_workflow_step_duration_seconds", "histogram"),
                        ("stead_api_requests_total", "counter"),
                        ("stead_api_request_duration_seconds", "histogram"),
                        ("stead_reconcile_queue_depth", "gauge"),
                        ("stead_reconcile_retries_pending", "gauge")]:
        assert f"# TYPE {name} {type_}" in text, name
        assert f"# HELP {name} " in text, name


def test_every_metrics_object_has_a_registry_of_its_own() -> None:
    first, second = Metrics(), Metrics()
    first.inc("stead_events_posted_total")
    assert second.value("stead_events_posted_total") == 0
    assert first.registry is not second.registry


def test_a_reconcile_is_observed_per_kind(tmp_path: Path) -> None:
    metrics = Metrics()
    rec = reconciler(tmp_path, metrics)
    asyncio.run(rec.on_event("ADDED", body()))
    assert metrics.value("stead_reconcile_runs_total", kind="Environment") == 1
    assert metrics.value("stead_reconcile_duration_seconds_count", kind="Environment") == 1
    assert metrics.value("stead_reconcile_duration_seconds_sum", kind="Environment") > 0
    assert metrics.value("stead_reconcile_duration_seconds_bucket", kind="Environment", le="+Inf") == 1


def test_workflow_steps_are_observed_by_type_and_outcome() -> None:
    metrics = Metrics()
    metrics.observe_step("ActionRun", "script", "succeeded", 0.2)
    metrics.observe_step("ActionRun", "script", "succeeded", 12.0)
    metrics.observe_step("ActionRun", "http", "failed", 0.03)
    script = {"kind": "ActionRun", "step_type": "script", "outcome": "succeeded"}
    assert metrics.value("stead_workflow_step_duration_seconds_count", **script) == 2
    assert metrics.value("stead_workflow_step_duration_seconds_sum", **script) == 12.2
    assert metrics.value("stead_workflow_step_duration_seconds_bucket", **script, le="1.0") == 1
    assert metrics.value("stead_workflow_step_duration_seconds_count", kind="ActionRun", step_type="http",
                         outcome="failed") == 1


def _get(port: int, path: str, method: str = "GET") -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_api_requests_are_counted_by_method_and_code_through_a_real_server() -> None:
    metrics = Metrics()

    async def handler(request: Request) -> Response:
        return Response(200, b"{}") if request.path == "/found" else Response(404, b"{}")

    async def scenario() -> list[int]:
        server = HttpServer(handler, observe=metrics.request_observer("config-api"))
        await server.start("127.0.0.1", 0)
        try:
            return [await asyncio.to_thread(_get, server.port, path, method)
                    for path, method in [("/found", "GET"), ("/found", "GET"), ("/missing", "GET"),
                                         ("/found", "BREW")]]
        finally:
            await server.stop(grace=1)

    assert asyncio.run(scenario()) == [200, 200, 404, 200]
    assert metrics.value("stead_api_requests_total", api="config-api", method="GET", code="200") == 2
    assert metrics.value("stead_api_requests_total", api="config-api", method="GET", code="404") == 1
    # an unknown method makes no series of its own
    assert metrics.value("stead_api_requests_total", api="config-api", method="other", code="200") == 1
    assert metrics.value("stead_api_request_duration_seconds_count", api="config-api", method="GET") == 3
    assert metrics.value("stead_api_request_duration_seconds_sum", api="config-api", method="GET") > 0


def test_a_failing_observer_does_not_fail_serving() -> None:
    def observe(method: str, status: int, seconds: float) -> None:
        raise RuntimeError("broken observer")

    async def handler(request: Request) -> Response:
        return Response(200, b"{}")

    async def scenario() -> int:
        server = HttpServer(handler, observe=observe)
        await server.start("127.0.0.1", 0)
        try:
            first = await asyncio.to_thread(_get, server.port, "/")
            return first + await asyncio.to_thread(_get, server.port, "/")
        finally:
            await server.stop(grace=1)

    assert asyncio.run(scenario()) == 400


def test_queue_depth_counts_objects_being_reconciled_or_waiting_and_retries_apart(tmp_path: Path) -> None:
    metrics = Metrics()
    gate = asyncio.Event()

    async def slow(ctx: StepContext) -> Mapping[str, Any]:
        if ctx.obj.name == "flaky":
            raise TemporaryError("NotYet", "a dependency is not ready")
        await gate.wait()
        return {}

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": slow}))
    rec = reconciler(tmp_path, metrics, kind)

    def depth() -> float:
        return metrics.value("stead_reconcile_queue_depth", kind="Environment")

    def retrying() -> float:
        return metrics.value("stead_reconcile_retries_pending", kind="Environment")

    async def scenario() -> list[tuple[float, float]]:
        seen = [(depth(), retrying())]
        e1 = Observed.from_body(body("e1"))
        tasks = [asyncio.create_task(rec.reconcile(object_key("Environment", "ns", "e1"), e1))]
        await asyncio.sleep(0)  # e1 holds its lock, in its step
        for generation in (2, 3):  # two more events for e1 coalesce into one waiter: e1 counts once
            later = Observed.from_body(body("e1", generation))
            tasks.append(asyncio.create_task(rec.reconcile(object_key("Environment", "ns", "e1"), later)))
        tasks.append(asyncio.create_task(rec.reconcile(object_key("Environment", "ns", "e2"),
                                                       Observed.from_body(body("e2")))))
        await asyncio.sleep(0)
        seen.append((depth(), retrying()))
        await rec.on_event("ADDED", body("flaky"))  # fails, waits 30 s for its retry
        seen.append((depth(), retrying()))
        gate.set()
        await asyncio.gather(*tasks)
        seen.append((depth(), retrying()))
        await rec.close()
        seen.append((depth(), retrying()))
        return seen

    assert asyncio.run(scenario()) == [(0, 0), (2, 0), (2, 1), (0, 1), (0, 0)]


def test_the_health_server_serves_the_registry_with_the_exposition_content_type(tmp_path: Path) -> None:
    metrics = Metrics()
    metrics.inc("stead_events_posted_total")
    reconciler(tmp_path, metrics)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])

    def fetch(accept: str | None = None) -> tuple[str, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={} if accept is None else {"Accept": accept})
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.headers["Content-Type"], answer.read().decode()

    async def scenario() -> list[tuple[str, str]]:
        health = HealthServer(metrics, "127.0.0.1", port)
        await health.start()
        try:
            return [await asyncio.to_thread(fetch),
                    await asyncio.to_thread(fetch, "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")]
        finally:
            await health.stop()

    (content_type, text), (openmetrics_type, openmetrics) = asyncio.run(scenario())
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert openmetrics_type.startswith("application/openmetrics-text; version=1.0.0")
    assert "stead_events_posted_total 1.0" in openmetrics.splitlines() and openmetrics.endswith("# EOF\n")
    assert "stead_events_posted_total 1.0" in text.splitlines()
    assert 'stead_reconcile_queue_depth{kind="Environment"} 0.0' in text.splitlines()
    assert families(metrics)["stead_events_posted"].type == "counter"
