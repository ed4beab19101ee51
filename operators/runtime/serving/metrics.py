"""The operator's metrics (Prometheus, through `prometheus-client`) and its health endpoints.

Stead counts what it costs the API server (status patches, events, lists) per kind, so the
claim "one PATCH per visible transition" can be checked from outside, and `/readyz` tells
a probe (or a test) when start-up is finished. Beside the counters, what an operator's users
graph:

- `stead_reconcile_duration_seconds{kind}` (histogram): one reconcile of one object, from the
  moment it holds the object's lock (waiting for it is queueing, not reconciling) to the end;
- `stead_workflow_step_duration_seconds{kind,step_type,outcome}` (histogram): one workflow step;
- `stead_api_requests_total{api,method,code}` (counter) and
  `stead_api_request_duration_seconds{api,method}` (histogram): the requests Stead's own HTTP APIs
  answered in the operator's process (`operators.runtime.serving.http`);
- `stead_reconcile_queue_depth{kind}` (gauge): objects being reconciled or waiting for their
  turn. Events for an object coalesce (one waiter per object, which takes the freshest body), so
  an object counts once however many events arrived; objects only waiting for a retry's backoff
  are not in it but in `stead_reconcile_retries_pending{kind}` (gauge), as a work queue keeps
  delayed items apart from its depth.

Each `Metrics` has a registry of its own, never the process-wide default: several operators may
run in one process (the tests do).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

COUNTERS: dict[str, str] = {
    "stead_events_seen_total": "Watch events received.",
    "stead_store_deleted_total": "Local store records dropped because their object was deleted.",
    "stead_not_owned_total": "Watch events for objects another replica owns (ignored).",
    "stead_stale_events_total": "Watch events older than the operator's own last write (ignored).",
    "stead_rechecks_total": "Objects checked again because an object they refer to changed readiness.",
    "stead_reconcile_skipped_total": "Reconciles that found nothing to do.",
    "stead_reconcile_restored_total": "Statuses restored from the local store without running the pipeline.",
    "stead_reconcile_runs_total": "Pipeline runs.",
    "stead_stalled_total": "Pipeline runs that ended in a permanent error (Stalled).",
    "stead_cleanups_total": "Cleanups of objects being deleted.",
    "stead_finalizer_patches_total": "PATCHes of an object's finalizers.",
    "stead_status_patches_total": "PATCHes of an object's status.",
    "stead_retries_total": "Retries scheduled after a temporary error.",
    "stead_waits_total": "Checks scheduled while an object waits for something expected (a run in progress).",
    "stead_store_adopted_total": "Provisioned objects the store had no record of, taken from their status as "
    "they are (a lost store, a restart on another volume).",
    "stead_outage_waits_total": "Objects set to wait for the API server to answer again (not retried on a "
    "timer meanwhile).",
    "stead_outage_writes_saved_total": "Status writes not sent because a reconcile ended in an outage of the API "
    "server and would only have changed the conditions.",
    "stead_retries_dropped_total": "Retries not scheduled because their object was deleted meanwhile.",
    "stead_events_posted_total": "Kubernetes Events posted.",
    "stead_events_dropped_total": "Kubernetes Events dropped because the queue to post them was full.",
    "stead_shard_unowned_total": "Projects found without a valid owner for longer than the lease (each time "
    "one is found so, once).",
    "stead_shard_labelled_total": "Bucket labels written by this replica (objects from before sharding, or "
    "whose project changed while the webhook was bypassed).",
    "stead_watch_lists_total": "LISTs made by the watches that feed the reconcilers.",
    "stead_watch_events_total": "Events received by the watches that feed the reconcilers.",
    "stead_watch_relists_total": "Watches listed again: the version was too old (expired), the API server "
    "failed (outage, error), or the selection changed.",
    "stead_watch_resumes_total": "Watches resumed from their last event after a dropped connection.",
    "stead_watch_coalesced_total": "Watch events not delivered because a newer body of the object was "
    "queued behind them.",
    "stead_shard_claims_collected_total": "Project claims (Leases) this replica deleted because their project had had "
    "no objects for a lease duration (--sharding leases).",
}
"""The help text of the counters Stead increments, by their name as exposed (with `_total`)."""

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
STEP_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0)
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as they are in `method` labels; any other is "other" (a client must not be able
to make series without bound)."""

RequestObserver = Callable[[str, int, float], None]
"""Called once per answered request with (method, status, seconds)."""


class Metrics:
    """The operator's counters, histograms and gauges, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._counters: dict[str, Counter] = {}
        self._children: dict[tuple[str, tuple[tuple[str, str], ...]], Counter] = {}
        self._queues: dict[str, tuple[Callable[[], int], Callable[[], int]]] = {}
        self.reconcile_duration = Histogram(
            "stead_reconcile_duration_seconds", "Time one reconcile of one object took (not counting the wait "
            "for the object's lock).", ["kind"], registry=self.registry, buckets=RECONCILE_BUCKETS)
        self.step_duration = Histogram(
            "stead_workflow_step_duration_seconds", "Time one workflow step took, by its type and outcome.",
            ["kind", "step_type", "outcome"], registry=self.registry, buckets=STEP_BUCKETS)
        self.api_requests = Counter(
            "stead_api_requests", "Requests answered by Stead's HTTP APIs in the operator's process.",
            ["api", "method", "code"], registry=self.registry)
        self.api_request_duration = Histogram(
            "stead_api_request_duration_seconds", "Time from a request's arrival to its answer, in Stead's "
            "HTTP APIs in the operator's process.", ["api", "method"], registry=self.registry,
            buckets=REQUEST_BUCKETS)
        self.registry.register(_QueueCollector(self._queues))

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add to the counter exposed as `name` (which ends in `_total`) with these labels."""
        key = (name, tuple(labels.items()))
        child = self._children.get(key)
        if child is None:  # prometheus_client's labels() costs a lock and a dict per call: once per series
            counter = self._counters.get(name)
            if counter is None:
                if not name.endswith("_total"):
                    raise ValueError(f"a counter's name ends in _total: {name}")
                counter = self._counters[name] = Counter(
                    name.removesuffix("_total"), COUNTERS.get(name, name), sorted(labels), registry=self.registry)
            child = self._children[key] = counter.labels(**labels) if labels else counter
        child.inc(amount)

    def value(self, name: str, **labels: str) -> float:
        """One sample's value as exposed (0 when absent): `x_total`, `x_count`, `x_sum`, a gauge..."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def observe_reconcile(self, kind: str, seconds: float) -> None:
        self.reconcile_duration.labels(kind=kind).observe(seconds)

    def observe_step(self, kind: str, step_type: str, outcome: str, seconds: float) -> None:
        """One workflow step of a `kind` object ended with `outcome` (e.g. succeeded, failed) after
        `seconds`."""
        self.step_duration.labels(kind=kind, step_type=step_type, outcome=outcome).observe(seconds)

    def request_observer(self, api: str) -> RequestObserver:
        """An `HttpServer.observe` for the API named `api`, called once per request on a hot path:
        the labelled series are looked up once per (method, status) and kept (prometheus-client's
        `labels()` is a locked lookup per call; bench/config_lookup.py --workers 0: 46 -> 42 us of
        server CPU per request; without any observer, 36)."""
        series: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

        def observe(method: str, status: int, seconds: float) -> None:
            found = series.get((method, status))
            if found is None:
                name = method.upper() if method.upper() in HTTP_METHODS else "other"
                found = series[(method, status)] = (
                    self.api_requests.labels(api=api, method=name, code=str(status)),
                    self.api_request_duration.labels(api=api, method=name))
                if len(series) > 256:  # methods and statuses are few; a client cannot make it grow
                    series.clear()
            found[0].inc()
            found[1].observe(seconds)

        return observe

    def gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A gauge whose value is read from `read` at each scrape."""
        Gauge(name, documentation, registry=self.registry).set_function(read)

    def track_queue(self, kind: str, depth: Callable[[], int], retrying: Callable[[], int]) -> None:
        """Read `kind`'s queue depth and pending retries from these functions at each scrape."""
        self._queues[kind] = (depth, retrying)

    def render(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)


class _QueueCollector:
    """The reconcilers' queue gauges, read when scraped: exact, with no bookkeeping to get wrong."""

    def __init__(self, queues: dict[str, tuple[Callable[[], int], Callable[[], int]]]) -> None:
        self._queues = queues

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "stead_reconcile_queue_depth", "Objects being reconciled or waiting for their turn (an object "
            "counts once however many events for it arrived).", labels=["kind"])
        retrying = GaugeMetricFamily(
            "stead_reconcile_retries_pending", "Objects waiting for a scheduled retry (backoff after a "
            "temporary error).", labels=["kind"])
        for kind, (read_depth, read_retrying) in sorted(self._queues.items()):
            depth.add_metric([kind], read_depth())
            retrying.add_metric([kind], read_retrying())
        return [depth, retrying]


class HealthServer:
    """`/metrics`, `/healthz` and `/readyz` on a plain HTTP port (loopback by default)."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self.ready = False
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._serve_metrics)
        app.router.add_get("/healthz", self._serve_health)
        app.router.add_get("/readyz", self._serve_ready)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        """The text format (`generate_latest`, `text/plain; version=0.0.4`) unless the scraper asks for
        another one prometheus-client writes (OpenMetrics: Prometheus asks for it first)."""
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self._metrics.registry), headers={"Content-Type": content_type})

    async def _serve_health(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _serve_ready(self, _: web.Request) -> web.Response:
        return web.Response(text="ready" if self.ready else "starting", status=200 if self.ready else 503)
