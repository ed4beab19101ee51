"""Pipeline throughput: create N Environments at once and time until every one is Ready.

DESIGN.md (section 3) makes two claims about Stead's runtime that only a real API server can
check: an object costs one status PATCH per visible transition, and running the pipeline as
function calls behind one low-level Kopf handler is much cheaper than Kopf's high-level
handlers. This benchmark prints the figures for three contenders, each on the same API server,
in a fresh namespace, with the same client sending the creates at the same concurrency:

- ``stead``: the real operator, ``stead run`` as a subprocess (webhook and Events included);
- ``kopf``: ``bench/kopf_baseline.py``, the same work in plain Kopf with default settings;
- ``raw``: no operator; the benchmark sends each create and then the one status merge-PATCH
  Stead would write. Nothing that reaches Ready through the API can do less, so it is the limit.

The clock starts just before the first create and stops when a WATCH (not a polling loop) has
seen every object with ``Ready=True`` at its generation and ``phase=Provisioned``. PATCHes per
object are counted from the API server's audit log, not taken from an operator's own metrics,
and so are the operator's other requests (told apart from the benchmark's by user agent).
CPU seconds of the operator, kube-apiserver, etcd and the benchmark over the timed interval
show where a 2-core machine's time went; `others` is what the rest of the machine took
meanwhile. On a shared machine that noise moves rates by tens of percent between runs, so
``--repeat`` interleaves runs and takes medians, and the report also gives the ratio of CPU cost
per object, which moves much less.

It starts its own LocalControlPlane in a temporary home on non-default ports and always stops
it, or uses the cluster of ``--kubeconfig`` (the audit log is found when that is a local control
plane's home, else pass ``--audit-log`` for the PATCH counts). Every contender has a deadline; a
miss is reported as a timeout, never a hang.

    .venv/bin/python bench/pipeline_throughput.py [--count 1000] [--concurrency 32] [--only stead]
                                                  [--repeat 3] [--workdir DIR --py-spy PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml

from operators import API_VERSION
from operators.catalog import KINDS
from operators.environment import KIND
from operators.environment.logic import summarize
from operators.environment.models import EnvironmentSpec
from operators.runtime.core import conditions as cond
from operators.runtime.core.pipeline import PROVISIONED, Observed, Outcome, compose_status
from operators.runtime.engine.reconciler import utc_now
from operators.runtime.kube.client import ApiError, ClusterAccess, KubeClient, custom_path, load_access
from operators.runtime.kube.crds import install_crds
from operators.runtime.kube.events import event_body

REPO: Final = Path(__file__).resolve().parent.parent
BIN: Final = Path(sys.executable).parent
EXAMPLE: Final = REPO / "examples" / "environment.yaml"
KOPF_BASELINE: Final = REPO / "bench" / "kopf_baseline.py"
BENCH_AGENT: Final = "stead-bench/pipeline-throughput"
"""The benchmark's User-Agent: it shares the operators' credentials, so this tells its requests apart."""
CONTENDERS: Final = ("raw", "raw-events", "kopf", "stead-base", "stead")
"""`raw-events`: raw plus the one Event Stead posts per object (its cost apart); `stead-base`: Stead from
`--stead-baseline` (another tree's code), run only when that is given."""
WEBHOOK_METRIC: Final = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST_METRIC: Final = "apiserver_request_duration_seconds"
PROFILE_BUCKETS: Final = (
    ("Events (EventRecorder: body, POST, answer)", "EventRecorder"),
    ("status PATCH (send, answer decoded)", "KubeClient.patch_status"),
    ("watch: lines decoded, dispatched", "Watch._handle"),
    ("  of which the config API's cache", "ConfigCache"),
    ("reconcile (plan, steps, store, compose)", "Reconciler._turn"),
    ("  of which spec parses (pydantic)", "model_validate"),
    ("  of which the local store (LMDB)", "LocalStore"),
    ("admission webhook (Kopf's server)", "admission"),
    ("graphs' auto-run loop", "AutoRunner"),
    ("metrics", "Metrics."),
)
"""What `--py-spy` samples are summed under (a sample counts for a bucket when its stack names the frame)."""
TRANSIENT: Final = frozenset({429, 500, 502, 503, 504})
WRITE_VERBS: Final = frozenset({"create", "patch", "update", "delete"})
TARGET_VS_RAW: Final = 0.90
TARGET_VS_KOPF: Final = 3.0
TARGET_OPERATOR_CPU_VS_KOPF: Final = 1 / 3
"""Issue 17: Stead's operator CPU per object at most a third of plain Kopf's, in the same run."""


def log(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the report."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- what is measured ------------------------------------------------------------------------


@dataclass
class AuditSummary:
    """What the API server recorded for one contender (each request once, by audit id)."""

    patches: int = 0
    patches_by_subresource: Counter[str] = field(default_factory=Counter)
    operator_requests: int = 0
    operator_calls: Counter[str] = field(default_factory=Counter)
    """`verb resource[/subresource] [user agent]` -> requests, from the clock's start on."""
    by_user: Counter[str] = field(default_factory=Counter)
    """`user (agent)` -> requests of anybody, from the clock's start on."""
    non_2xx: Counter[str] = field(default_factory=Counter)
    events_in_time: int = 0
    """Event creates received before every object was Ready (Stead posts them from a queue, one at a time)."""
    events_trail: float = 0.0
    """Seconds from all-Ready to the last Event create received (0: none after)."""
    writes: Counter[str] = field(default_factory=Counter)
    """`verb resource[/subresource]` -> writes (create, patch, update, delete) in the run's namespace,
    whoever sent them, from the clock's start on: the API server's write load per contender."""


@dataclass
class Result:
    contender: str
    count: int
    seconds: float | None = None
    """None: the deadline passed or the run failed before every object was Ready."""
    ready: int = 0
    error: str | None = None
    audit: AuditSummary | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds over the timed interval, by process (operator, kube-apiserver, etcd, bench)."""
    machine_busy: float | None = None
    """Share of the machine's CPU time that was busy over the timed interval (0..1)."""
    load: float = 0.0
    load_end: float = 0.0
    ready_at: float | None = None
    """Wall clock (epoch seconds) when every object was seen Ready."""
    cpu_after: dict[str, float] = field(default_factory=dict)
    """CPU seconds by process from all-Ready until the audit log went quiet (trailing Events)."""
    retries: int = 0
    apiserver: dict[str, tuple[float, float]] = field(default_factory=dict)
    """From the API server's own metrics over the run: `webhook NAME (type)` and `VERB resource[/sub]` ->
    (calls, seconds spent in them)."""
    profile: list[tuple[str, float]] = field(default_factory=list)
    """With `--py-spy`: share of the operator's samples per `PROFILE_BUCKETS` entry (and `samples`)."""

    @property
    def rate(self) -> float | None:
        return self.count / self.seconds if self.seconds else None

    @property
    def cpu_per_object(self) -> float | None:
        """Milliseconds of CPU per object spent by the processes under test (not by `others`).

        It depends much less than the rate on what else runs on the machine (contention still
        inflates CPU time somewhat): on a CPU-bound machine with nothing else running, rates
        would be in the inverse ratio of these costs.
        """
        spent = sum(v for k, v in self.cpu.items() if k != "others")
        return spent * 1000 / self.count if self.cpu else None


@dataclass(frozen=True)
class Target:
    """The cluster under test and what the benchmark can observe of it."""

    kubeconfig: Path
    audit_log: Path | None
    pids: Mapping[str, int]


# --- objects ---------------------------------------------------------------------------------


def environment_manifest(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND.kind, "metadata": {"name": name}, "spec": dict(spec)}


def provisioned_status(body: Mapping[str, Any]) -> dict[str, Any]:
    """The status Stead writes for a valid Environment, composed by Stead's own function."""
    obj = Observed.from_body(body)
    facts = summarize(EnvironmentSpec.model_validate(dict(obj.spec)))
    return compose_status(obj, Outcome(phase=PROVISIONED, facts=facts), utc_now())


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Ready=True about the object's current generation, and phase Provisioned."""
    generation = (obj.get("metadata") or {}).get("generation")
    status = obj.get("status") or {}
    ready = cond.find(status.get("conditions") or [], cond.READY)
    return (
        status.get("phase") == PROVISIONED
        and ready is not None
        and ready.get("status") == "True"
        and ready.get("observedGeneration") == generation
    )


# --- watching --------------------------------------------------------------------------------


def watch_session(access: ClusterAccess) -> aiohttp.ClientSession:
    """A session for long-lived watches: no total timeout (the server ends them by timeoutSeconds)."""
    return aiohttp.ClientSession(
        base_url=access.server,
        headers=access.headers,
        connector=aiohttp.TCPConnector(ssl=access.ssl_context, limit=4),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
    )


async def list_all(session: aiohttp.ClientSession, path: str, params: Mapping[str, str]) -> tuple[
    list[dict[str, Any]], str
]:
    """Every item of a (paginated) list, and the list's resourceVersion to watch from."""
    items: list[dict[str, Any]] = []
    query = {**params, "limit": "500"}
    while True:
        async with session.get(path, params=query) as resp:
            if resp.status >= 300:
                raise ApiError(resp.status, await resp.text())
            page = await resp.json()
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion", ""))
        query = {**params, "limit": "500", "continue": meta["continue"]}


class WatchExpired(Exception):
    """410 Gone: the resourceVersion is too old; list again."""


async def watch_stream(
    session: aiohttp.ClientSession,
    path: str,
    params: Mapping[str, str],
    resource_version: str,
    started: Callable[[], None],
) -> AsyncIterator[dict[str, Any]]:
    """Yield watch events from `resource_version` until the server ends the stream."""
    query = {**params, "watch": "true", "allowWatchBookmarks": "true", "resourceVersion": resource_version,
             "timeoutSeconds": "300"}
    async with session.get(path, params=query) as resp:
        if resp.status == 410:
            raise WatchExpired()
        if resp.status >= 300:
            raise ApiError(resp.status, await resp.text())
        started()
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event: dict[str, Any] = json.loads(line)
                if event.get("type") == "ERROR":
                    if (event.get("object") or {}).get("code") == 410:
                        raise WatchExpired()
                    raise ApiError(int((event.get("object") or {}).get("code") or 500), str(event.get("object")))
                yield event


class ReadyWatch:
    """Counts the benchmark's objects that are Ready at their generation, from one WATCH.

    `established` is set once the watch stream is open (so no event before the first create
    can be missed), `all_ready` once every expected object has been seen Ready. A watch the
    server ends is resumed from its last resourceVersion; a 410 leads to a fresh list.
    """

    def __init__(self, access: ClusterAccess, namespace: str, names: Sequence[str]) -> None:
        self._access = access
        self._path = custom_path(KIND.plural, namespace)
        self._expected = frozenset(names)
        self.ready: set[str] = set()
        self.established = asyncio.Event()
        self.all_ready = asyncio.Event()
        self.events = 0

    def _see(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if name not in self._expected:
            return
        if not deleted and is_ready(obj):
            self.ready.add(name)
        else:
            self.ready.discard(name)
        if len(self.ready) == len(self._expected):
            self.all_ready.set()

    async def run(self) -> None:
        async with watch_session(self._access) as session:
            resource_version = ""
            while True:
                if not resource_version:
                    items, resource_version = await list_all(session, self._path, {})
                    self.ready.clear()
                    for item in items:
                        self._see(item)
                try:
                    async for event in watch_stream(session, self._path, {}, resource_version,
                                                    self.established.set):
                        self.events += 1
                        obj = event.get("object") or {}
                        resource_version = str((obj.get("metadata") or {}).get("resourceVersion")
                                               or resource_version)
                        if event.get("type") != "BOOKMARK":
                            self._see(obj, deleted=event.get("type") == "DELETED")
                except WatchExpired:
                    resource_version = ""


async def wait_namespace_gone(access: ClusterAccess, namespace: str, within: float) -> bool:
    """Watch (not poll) until the namespace is deleted; False if it is still there at the timeout."""
    params = {"fieldSelector": f"metadata.name={namespace}"}

    async def gone() -> None:
        async with watch_session(access) as session:
            resource_version = ""
            while True:
                if not resource_version:
                    items, resource_version = await list_all(session, "/api/v1/namespaces", params)
                    if not items:
                        return
                try:
                    async for event in watch_stream(session, "/api/v1/namespaces", params, resource_version,
                                                    lambda: None):
                        if event.get("type") == "DELETED":
                            return
                        meta = (event.get("object") or {}).get("metadata") or {}
                        resource_version = str(meta.get("resourceVersion") or resource_version)
                except WatchExpired:
                    resource_version = ""

    try:
        await asyncio.wait_for(gone(), within)
    except TimeoutError:
        return False
    return True


# --- driving the API server ------------------------------------------------------------------


@dataclass
class DriveStats:
    created: int = 0
    patched: int = 0
    retries: int = 0


async def call_with_retry(stats: DriveStats, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """Retry what a loaded API server may refuse for a moment (429, 5xx, a dropped connection)."""
    for attempt in range(6):
        try:
            return await call()
        except ApiError as error:
            if error.status not in TRANSIENT or attempt == 5:
                raise
        except (aiohttp.ClientError, TimeoutError):
            if attempt == 5:
                raise
        stats.retries += 1
        await asyncio.sleep(0.2 * 2**attempt)  # backoff before a retry, not a synchronisation
    raise AssertionError("unreachable")


async def drive(
    kube: KubeClient, namespace: str, names: Sequence[str], spec: Mapping[str, Any], concurrency: int,
    write_status: bool, stats: DriveStats, post_event: bool = False,
) -> None:
    """Create every object with `concurrency` requests in flight; `write_status`: also its status PATCH;
    `post_event`: then the Event Stead posts for it (the same body, `event_body`), to price Events apart.

    One worker handles one object at a time (create, then for `raw` its PATCH), so the number of
    requests in flight is the same for every contender.
    """
    path = custom_path(KIND.plural, namespace)
    pending = iter(names)

    async def create(name: str) -> dict[str, Any]:
        manifest = environment_manifest(name, spec)
        try:
            return await call_with_retry(stats, lambda: kube.request("POST", path, manifest))
        except ApiError as error:
            if error.status != 409:  # 409: an earlier, timed-out attempt did create it
                raise
            return await kube.request("GET", custom_path(KIND.plural, namespace, name))

    async def write(name: str, status: dict[str, Any]) -> None:
        await call_with_retry(stats, lambda: kube.patch_status(KIND.plural, namespace, name, status))
        stats.patched += 1

    async def event(body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        involved = {"apiVersion": API_VERSION, "kind": KIND.kind, "name": meta.get("name"),
                    "namespace": namespace, "uid": meta.get("uid")}
        message = f"{KIND.kind} is provisioned"
        event = event_body(involved, namespace, "Normal", PROVISIONED, message, "bench")
        await call_with_retry(stats, lambda: kube.request("POST", f"/api/v1/namespaces/{namespace}/events", event))

    async def worker() -> None:
        for name in pending:  # a shared iterator: each name goes to exactly one worker
            body = await create(name)
            stats.created += 1
            if write_status:
                await write(name, provisioned_status(body))
            if post_event:
                await event(body)

    try:
        async with asyncio.TaskGroup() as group:  # the first failure cancels the other workers
            for _ in range(concurrency):
                group.create_task(worker())
    except* (ApiError, aiohttp.ClientError, TimeoutError) as failures:
        raise failures.exceptions[0] from None


# --- the audit log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditMark:
    """A position in the audit log that survives rotation: the file (by inode) and an offset.

    kube-apiserver rotates its log at `--audit-log-maxsize` MB, and 0 there means lumberjack's
    default of 100 MB, not "never": a 1,000-object run writes a few MB, so a long session rotates.
    """

    inode: int = 0
    offset: int = 0


def audit_mark(target: Target) -> AuditMark:
    if target.audit_log is None:
        return AuditMark()
    try:
        stat = target.audit_log.stat()
    except OSError:
        return AuditMark()
    return AuditMark(stat.st_ino, stat.st_size)


def read_audit_between(path: Path, start: AuditMark, end: AuditMark | None = None) -> Iterator[dict[str, Any]]:
    """Audit events from `start` to `end` (default: now), following rotations in between.

    A rotated file keeps its inode under a new name (`audit-<time>.log`), so the pieces are: the
    start's file from its offset, any later rotated files whole, the current file up to `end`.
    """
    end = end or AuditMark(path.stat().st_ino, path.stat().st_size)
    if start.inode == end.inode:
        yield from read_audit(path, start.offset, end.offset)
        return
    rotated = sorted(path.parent.glob(f"{path.stem}-*{path.suffix}"), key=lambda p: p.stat().st_mtime)
    following = False
    for piece in rotated:
        if piece.stat().st_ino == start.inode:
            following = True
            yield from read_audit(piece, start.offset)
        elif following and piece.stat().st_ino != end.inode:
            yield from read_audit(piece, 0)
    yield from read_audit(path, 0, end.offset)


def read_audit(path: Path, start: int, end: int | None = None) -> Iterator[dict[str, Any]]:
    """Audit events written between two offsets; partial lines at either edge are skipped."""
    with open(path, "rb") as stream:
        begin = max(0, start - 1)
        stream.seek(begin)
        data = stream.read() if end is None else stream.read(max(0, end - begin))
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the byte before `start` was "\n" (then lines[0] is empty) or mid-line
    for line in lines[:-1]:  # the last piece has no newline yet: incomplete
        with contextlib.suppress(ValueError):
            yield json.loads(line)


def _received(event: Mapping[str, Any]) -> float:
    stamp = str(event.get("requestReceivedTimestamp") or "")
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def _agent(event: Mapping[str, Any]) -> str:
    """The user agent without the platform details Go clients add in parentheses."""
    return str(event.get("userAgent") or "?").split(" (", 1)[0]


def summarize_audit(events: Iterator[dict[str, Any]], namespace: str, since: float,
                    until: float | None = None) -> AuditSummary:
    """Count the contender's PATCHes on its namespace's Environments and the operator's requests.

    The operator is recognized as the benchmark's user with another user agent (they share the
    kubeconfig). PATCHes are counted whoever sent them (for `raw` it is the benchmark).
    """
    by_id: dict[str, dict[str, Any]] = {}
    for event in events:
        by_id[str(event.get("auditID"))] = event  # a watch logs ResponseStarted, then ResponseComplete
    bench_user = next((str((e.get("user") or {}).get("username")) for e in by_id.values()
                       if str(e.get("userAgent", "")).startswith(BENCH_AGENT)), None)
    summary = AuditSummary()
    for event in by_id.values():
        ref = event.get("objectRef") or {}
        verb = str(event.get("verb"))
        sub = ref.get("subresource")
        if verb == "patch" and ref.get("resource") == KIND.plural and ref.get("namespace") == namespace:
            summary.patches += 1
            summary.patches_by_subresource[sub or "(object)"] += 1
        if _received(event) < since:
            continue
        if verb in WRITE_VERBS and ref.get("namespace") == namespace:
            summary.writes[f"{verb} {ref.get('resource')}{'/' + sub if sub else ''}"] += 1
            if verb == "create" and ref.get("resource") == "events" and until is not None:
                if _received(event) <= until:
                    summary.events_in_time += 1
                else:
                    summary.events_trail = max(summary.events_trail, _received(event) - until)
        user = str((event.get("user") or {}).get("username"))
        agent = _agent(event)
        summary.by_user[f"{user} ({agent})"] += 1
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        what = f"{verb} {ref.get('resource') or event.get('requestURI')}{'/' + sub if sub else ''}"
        if code >= 300 and event.get("stage") == "ResponseComplete":
            summary.non_2xx[f"{what} -> {code} [{agent}]"] += 1
        if user == bench_user and not agent.startswith(BENCH_AGENT):
            summary.operator_requests += 1
            summary.operator_calls[f"{what} [{agent}]"] += 1
    return summary


async def operator_watching(target: Target, start: AuditMark) -> bool:
    """True once the audit log shows a WATCH on Environments opened by someone other than us."""
    path = target.audit_log
    if path is None:
        return True
    events = await asyncio.to_thread(lambda: list(read_audit_between(path, start)))
    return any(
        e.get("verb") == "watch" and (e.get("objectRef") or {}).get("resource") == KIND.plural
        and not str(e.get("userAgent", "")).startswith(BENCH_AGENT)
        for e in events
    )


async def settle(target: Target, quiet: float, limit: float) -> None:
    """Give trailing requests (Events posted after Ready, late PATCHes) time to reach the audit log.

    Waits until the log has not grown for `quiet` seconds, at most `limit` seconds.
    """
    if target.audit_log is None:
        await asyncio.sleep(quiet)
        return
    deadline = time.monotonic() + limit
    size, still_since = audit_mark(target), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - still_since < quiet:
        await asyncio.sleep(0.25)
        now = audit_mark(target)
        if now != size:
            size, still_since = now, time.monotonic()


# --- CPU accounting --------------------------------------------------------------------------


def process_cpu(pid: int) -> float | None:
    """utime + stime of a process, in seconds (fields 14 and 15 of /proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    values = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    total = sum(values[:8])
    return total - idle, total


@dataclass
class CpuSnapshot:
    processes: dict[str, float]
    machine: tuple[float, float]

    @classmethod
    def take(cls, pids: Mapping[str, int]) -> CpuSnapshot:
        processes = {name: cpu for name, pid in pids.items() if (cpu := process_cpu(pid)) is not None}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        processes["bench"] = usage.ru_utime + usage.ru_stime
        return cls(processes, machine_cpu())

    def since(self, earlier: CpuSnapshot) -> tuple[dict[str, float], float | None]:
        """CPU seconds per process, `others` (everything else on the machine), and the busy share."""
        used = {name: value - earlier.processes[name]
                for name, value in self.processes.items() if name in earlier.processes}
        total = self.machine[1] - earlier.machine[1]
        busy_jiffies = self.machine[0] - earlier.machine[0]
        used["others"] = max(0.0, busy_jiffies / os.sysconf("SC_CLK_TCK") - sum(used.values()))
        return used, (busy_jiffies / total if total > 0 else None)


# --- the API server's own metrics and the profile ---------------------------------------------

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_apiserver_metrics(text: str) -> dict[str, tuple[float, float]]:
    """Admission webhook calls (`webhook NAME (type)`) and requests but watches (`VERB resource[/sub]`)
    -> (count, seconds), summed over the other labels, from the API server's Prometheus text."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for metric in (WEBHOOK_METRIC, REQUEST_METRIC):
            if not line.startswith(metric + "_count{") and not line.startswith(metric + "_sum{"):
                continue
            head, _, value = line.rpartition(" ")
            labels = dict(_LABEL.findall(head))
            if metric == WEBHOOK_METRIC:
                key = f"webhook {labels.get('name')} ({labels.get('type')})"
            elif labels.get("verb") in ("WATCH", "CONNECT"):
                continue
            else:
                sub = labels.get("subresource")
                key = f"{labels.get('verb')} {labels.get('resource')}{'/' + sub if sub else ''}"
            pair = out.setdefault(key, [0.0, 0.0])
            pair[0 if head.startswith(metric + "_count") else 1] += float(value)
    return {key: (pair[0], pair[1]) for key, pair in out.items()}


async def apiserver_metrics(access: ClusterAccess) -> dict[str, tuple[float, float]]:
    """The API server's counters now ({} when /metrics cannot be read: the report then says so)."""
    try:
        async with watch_session(access) as session, session.get("/metrics") as resp:
            return parse_apiserver_metrics(await resp.text()) if resp.status == 200 else {}
    except (aiohttp.ClientError, TimeoutError):
        return {}


def metrics_since(before: Mapping[str, tuple[float, float]],
                  after: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    out = {}
    for key, (count, seconds) in after.items():
        old_count, old_seconds = before.get(key, (0.0, 0.0))
        if count - old_count > 0:
            out[key] = (count - old_count, seconds - old_seconds)
    return out


def profile_shares(path: Path) -> list[tuple[str, float]]:
    """py-spy's collapsed stacks (`frame;frame;... count`) summed into `PROFILE_BUCKETS`: the share of the
    operator's samples whose stack names each bucket's frame, and ("samples", their number)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    totals = Counter[str]()
    samples = 0
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples += int(count)
        for label, frame in PROFILE_BUCKETS:
            if frame in stack:
                totals[label] += int(count)
    if not samples:
        return []
    return [("samples", float(samples))] + [(label, totals[label] / samples) for label, _ in PROFILE_BUCKETS]


# --- the operators ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OperatorProcess:
    """One operator under test: started as its users start it, ready when healthy and watching."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], health_url: str,
                 log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.health_url = health_url
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self, target: Target, within: float) -> None:
        audit_start = audit_mark(target)
        log(f"starting {self.name}: {shlex.join(self.argv)} (log {self.log_path})")
        with open(self.log_path, "wb") as output:  # noqa: ASYNC230 - opening a log file, once
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=asyncio.subprocess.STDOUT,
                env=self.env, cwd=REPO, start_new_session=True,
            )
        deadline = time.monotonic() + within
        healthy = False
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                if self.process.returncode is not None:
                    raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
                if not healthy:
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with http.get(self.health_url) as resp:
                            healthy = resp.status == 200
                if healthy and await operator_watching(target, audit_start):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name} not ready after {within:.0f}s:\n{self.log_tail()}")
                await asyncio.sleep(0.1)  # start-up readiness only; objects are watched, not polled

    async def stop(self, grace: float = 20.0) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), grace)
        except TimeoutError:
            log(f"{self.name} ignored SIGTERM for {grace:.0f}s: killing it")
            self.process.kill()
            await self.process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def child_env(kubeconfig: Path, pythonpath: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["KUBECONFIG"] = str(kubeconfig)
    env["PYTHONUNBUFFERED"] = "1"
    paths = [p for p in (pythonpath, str(REPO), env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def stead_operator(args: argparse.Namespace, target: Target, workdir: Path,
                   pythonpath: str | None = None) -> tuple[OperatorProcess, int]:
    """`stead run` as the benchmarks start it, from `pythonpath` (default `--stead-pythonpath`) first."""
    webhook_port, health_port = free_port(), free_port()
    argv = [*shlex.split(args.stead_command), "run", "--kubeconfig", str(target.kubeconfig),
            "--store", str(workdir / "stead-store"), "--webhook-port", str(webhook_port),
            "--health-port", str(health_port), "--install-crds", "--config-api-port", str(free_port())]
    if args.stead_webhook == "off":
        argv += ["--webhook", "off"]
    env = child_env(target.kubeconfig, pythonpath or getattr(args, "stead_pythonpath", None))
    env["STEAD_HOME"] = str(workdir)  # its generated CAs land here, not in the user's home
    return (OperatorProcess("stead", argv, env, f"http://127.0.0.1:{health_port}/readyz",
                            workdir / "stead.log"), webhook_port)


def kopf_operator(args: argparse.Namespace, target: Target, workdir: Path) -> OperatorProcess:
    port = free_port()
    argv = [str(BIN / "kopf"), "run", str(KOPF_BASELINE), "--all-namespaces", "--standalone",
            "--liveness", f"http://127.0.0.1:{port}/healthz"]
    return OperatorProcess("kopf", argv, child_env(target.kubeconfig, None),
                           f"http://127.0.0.1:{port}/healthz", workdir / "kopf.log")


async def remove_stead_webhooks(kube: KubeClient, webhook_port: int) -> None:
    """Stead (local webhook mode) leaves its webhook configurations behind when it stops; with
    `failurePolicy: Fail` they would refuse every later create. Ours are those at our port."""
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
        found = await kube.request("GET", path, params={"labelSelector": "app.kubernetes.io/part-of=stead"})
        for config in found.get("items") or []:
            urls = [str((hook.get("clientConfig") or {}).get("url", "")) for hook in config.get("webhooks") or []]
            if any(f":{webhook_port}/" in url for url in urls):
                with contextlib.suppress(ApiError):
                    await kube.request("DELETE", f"{path}/{config['metadata']['name']}")


async def start_profiler(py_spy: Path | None, operator: OperatorProcess | None,
                         output: Path) -> asyncio.subprocess.Process | None:
    """py-spy attached to the operator (non-blocking sampling, collapsed stacks), for finding hot spots."""
    if py_spy is None or operator is None or operator.pid is None:
        return None
    profiler = await asyncio.create_subprocess_exec(
        str(py_spy), "record", "--pid", str(operator.pid), "--nonblocking", "--rate", "1000", "--format", "raw",
        "--output", str(output), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    await asyncio.sleep(0.5)  # py-spy needs a moment to attach before the clock starts
    return profiler


async def stop_profiler(profiler: asyncio.subprocess.Process | None) -> None:
    """SIGINT makes py-spy write its output and exit."""
    if profiler is None or profiler.returncode is not None:
        return
    profiler.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(profiler.wait(), 30)
    except TimeoutError:
        profiler.kill()
        await profiler.wait()


# --- one contender ---------------------------------------------------------------------------


async def create_namespace(kube: KubeClient, prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    await kube.request("POST", "/api/v1/namespaces",
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
                                                                             "labels": {"stead.dev/bench": "true"}}})
    return name


async def delete_namespace(kube: KubeClient, access: ClusterAccess, namespace: str, within: float) -> None:
    log(f"deleting namespace {namespace}")
    try:
        await kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
    except ApiError as error:
        if error.status != 404:
            raise
        return
    if not await wait_namespace_gone(access, namespace, within):
        log(f"namespace {namespace} still terminating after {within:.0f}s; going on")


async def warm_up(kube: KubeClient, access: ClusterAccess, spec: Mapping[str, Any], args: argparse.Namespace) -> None:
    """Create, status-patch and delete a few objects first, so no contender pays for cold caches."""
    namespace = await create_namespace(kube, "bench-warmup")
    try:
        names = [f"warm-{i:05d}" for i in range(args.warmup)]
        await drive(kube, namespace, names, spec, args.concurrency, write_status=True, stats=DriveStats())
    finally:
        await delete_namespace(kube, access, namespace, args.cleanup_timeout)


async def measure(
    contender: str, args: argparse.Namespace, target: Target, access: ClusterAccess, kube: KubeClient,
    spec: Mapping[str, Any], workdir: Path,
) -> Result:
    """Run one contender from a fresh namespace to all-Ready (or its deadline), then clean up."""
    result = Result(contender, args.count)
    names = [f"env-{i:05d}" for i in range(args.count)]
    namespace = await create_namespace(kube, f"bench-{contender}")
    operator: OperatorProcess | None = None
    webhook_port: int | None = None
    stats = DriveStats()
    tasks: list[asyncio.Task[Any]] = []
    since = time.time()
    audit_start = AuditMark()
    audit_end: AuditMark | None = None
    rundir = workdir / namespace  # the operator's log, store and profile of this run
    rundir.mkdir(parents=True, exist_ok=True)
    try:
        if contender == "stead":
            operator, webhook_port = stead_operator(args, target, rundir)
        elif contender == "stead-base":
            operator, webhook_port = stead_operator(args, target, rundir, str(args.stead_baseline))
        elif contender == "kopf":
            operator = kopf_operator(args, target, rundir)
        if operator is not None:
            await operator.start(target, args.start_timeout)
            # Stead applies its shipped ClusterLifecycles once ready (through its own webhook, ~1 s each on
            # a loaded 2-core machine): start-up work that must not land in the timed interval
            await settle(target, args.settle, limit=30.0)
        pids = dict(target.pids)
        if operator is not None and operator.pid is not None:
            pids["operator"] = operator.pid
        audit_start = audit_mark(target)
        watch = ReadyWatch(access, namespace, names)
        watcher = asyncio.create_task(watch.run())
        tasks.append(watcher)
        await asyncio.wait({watcher, asyncio.create_task(watch.established.wait())},
                           timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if not watch.established.is_set():
            why = watcher.exception() if watcher.done() else "no answer in 30s"
            raise RuntimeError(f"the watch on {namespace} did not open: {why}")

        result.load = os.getloadavg()[0]
        log(f"{contender}: creating {args.count} Environments in {namespace}, {args.concurrency} in flight "
            f"(load average {result.load:.2f})")
        profiler = await start_profiler(args.py_spy, operator, rundir / "pyspy.txt")
        metrics_before = await apiserver_metrics(access)
        before = CpuSnapshot.take(pids)
        since = time.time()
        started = time.monotonic()
        driver = asyncio.create_task(drive(kube, namespace, names, spec, args.concurrency,
                                           write_status=contender.startswith("raw"), stats=stats,
                                           post_event=contender == "raw-events"))
        tasks.append(driver)
        all_ready = asyncio.create_task(watch.all_ready.wait())
        tasks.append(all_ready)
        deadline = started + args.deadline
        while not all_ready.done():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            watched = {all_ready, watcher} | ({driver} if not driver.done() else set())
            done, _ = await asyncio.wait(watched, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for task in done & {driver, watcher}:
                if task.exception() is not None:
                    raise RuntimeError(f"{'creating' if task is driver else 'watching'} failed: "
                                       f"{task.exception()!r}")
            if watcher in done:
                raise RuntimeError("the watch ended")
        if all_ready.done():
            result.seconds = time.monotonic() - started
            result.ready_at = time.time()
        else:
            result.error = f"timeout after {args.deadline:.0f}s"
        after = CpuSnapshot.take(pids)
        result.cpu, result.machine_busy = after.since(before)
        result.load_end = os.getloadavg()[0]
        result.apiserver = metrics_since(metrics_before, await apiserver_metrics(access))
        await stop_profiler(profiler)
        if profiler is not None:
            result.profile = profile_shares(rundir / "pyspy.txt")
        result.ready = len(watch.ready)
        result.retries = stats.retries
        log(f"{contender}: {result.ready}/{args.count} Ready"
            + (f" in {result.seconds:.2f}s" if result.seconds else f" ({result.error})")
            + f"; {watch.events} watch events")
        await settle(target, args.settle, limit=30.0)
        result.cpu_after = CpuSnapshot.take(pids).since(after)[0]
        audit_end = audit_mark(target)
    except Exception as error:  # one contender failing must not take the others down
        result.error = f"{type(error).__name__}: {error}"
        log(f"{contender} failed: {result.error}")
        if operator is not None:
            log(f"{contender} log tail:\n{operator.log_tail()}")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if operator is not None:
            await operator.stop()
        if webhook_port is not None:
            await remove_stead_webhooks(kube, webhook_port)
        await delete_namespace(kube, access, namespace, args.cleanup_timeout)
    path = target.audit_log
    if path is not None and audit_end is not None:
        events = await asyncio.to_thread(lambda: list(read_audit_between(path, audit_start, audit_end)))
        result.audit = summarize_audit(iter(events), namespace, since, result.ready_at)
    return result


# --- the report ------------------------------------------------------------------------------


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def medians(results: Sequence[Result], metric: Callable[[Result], float | None]) -> dict[str, float | None]:
    """Each contender's median of `metric` over its runs; None when a run did not give one."""
    out: dict[str, float | None] = {}
    for contender in dict.fromkeys(r.contender for r in results):
        values = [metric(r) for r in results if r.contender == contender]
        out[contender] = None if any(v is None for v in values) else _median([v for v in values if v is not None])
    return out


def _row(r: Result, label: str) -> list[str]:
    audit = r.audit
    return [
        label, str(r.count),
        _fmt(r.seconds, ".2f") if r.seconds else (r.error or "failed")[:40],
        _fmt(r.rate, ".1f"),
        _fmt(audit.patches / r.count if audit else None, ".2f"),
        _fmt(audit.operator_requests / r.count if audit and r.contender != "raw" else None, ".2f"),
        _fmt(r.cpu.get("operator"), ".1f"),
        _fmt(r.cpu.get("kube-apiserver"), ".1f"),
        _fmt(r.cpu.get("etcd"), ".1f"),
        _fmt(r.cpu.get("bench"), ".1f"),
        _fmt(r.cpu.get("others"), ".1f"),
        _fmt(r.machine_busy * 100 if r.machine_busy is not None else None, ".0f") + "%",
        _fmt(r.cpu_per_object, ".2f"),
        f"{r.load:.1f}-{r.load_end:.1f}",
    ]


def report(results: Sequence[Result], args: argparse.Namespace) -> str:
    """The table, the ratios against their targets, and where each operator's requests went.

    With `--repeat`, every run gets a row and the ratios use each contender's median rate:
    on a shared 2-core machine one run can be slowed by whatever else runs at that moment
    (the `others CPU s` column shows how much did).
    """
    header = ["contender", "N", "seconds", "objects/s", "PATCH/obj", "op req/obj", "op CPU s",
              "apiserver CPU s", "etcd CPU s", "bench CPU s", "others CPU s", "machine busy",
              "CPU ms/obj", "load"]
    rows = [header]
    runs: Counter[str] = Counter()
    for r in results:
        runs[r.contender] += 1
        rows.append(_row(r, f"{r.contender}#{runs[r.contender]}" if args.repeat > 1 else r.contender))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    rates = medians(results, lambda r: r.rate)
    costs = medians(results, lambda r: r.cpu_per_object)
    lines.append("")
    lines.append(f"concurrency {args.concurrency}, {os.cpu_count()} CPUs ({cpu_model()}), stead webhook "
                 f"{args.stead_webhook}" + (f", {args.repeat} interleaved runs each" if args.repeat > 1 else ""))
    loads: list[tuple[float, float, float]] = getattr(args, "loads", [])
    if len(loads) == 2:
        lines.append("load average (1, 5, 15 min) at the start " + ", ".join(f"{v:.2f}" for v in loads[0])
                     + "; at the end " + ", ".join(f"{v:.2f}" for v in loads[1]))
    if args.repeat > 1:
        lines.append("median objects/s: " + ", ".join(f"{c} {_fmt(rate, '.1f')}" for c, rate in rates.items()))
    operator_cpu = medians(results, lambda r: r.cpu["operator"] / r.count * 1000
                           if r.seconds and r.cpu.get("operator") is not None else None)
    for mine, name in (("stead", "Stead"), ("stead-base", "Stead (baseline tree)")):
        stead = rates.get(mine)
        if mine not in rates:
            continue
        for other, target, unit in (("raw", TARGET_VS_RAW, ""), ("kopf", TARGET_VS_KOPF, "x")):
            if other in rates:
                base = rates[other]
                if stead and base:
                    ratio = stead / base
                    verdict = "met" if ratio >= target else "MISSED"
                    line = f"{name}/{other}: {ratio:.2f}{unit} (target >= {target:.2f}{unit}: {verdict})"
                    stead_cost, other_cost = costs.get(mine), costs.get(other)
                    if stead_cost and other_cost:
                        line += f"; by CPU cost per object: {other_cost / stead_cost:.2f}{unit}"
                    lines.append(line)
                else:
                    lines.append(f"{name}/{other}: - (a run did not finish)")
        ours, theirs = operator_cpu.get(mine), operator_cpu.get("kopf")
        if ours and theirs:
            verdict = "met" if ours / theirs <= TARGET_OPERATOR_CPU_VS_KOPF else "MISSED"
            lines.append(f"{name}: operator CPU per object {ours:.2f} ms, kopf {theirs:.2f} ms: {ours / theirs:.2f} "
                         f"(target <= {TARGET_OPERATOR_CPU_VS_KOPF:.2f}: {verdict})")
    lines += explain(results)
    shown: set[str] = set()
    for r in results:
        if r.audit is None or r.contender in shown:
            continue
        shown.add(r.contender)  # the request mix does not change between runs: show the first
        lines.append("")
        subs = ", ".join(f"{k} {v}" for k, v in sorted(r.audit.patches_by_subresource.items()))
        lines.append(f"{r.contender}: {r.audit.patches} PATCHes on environments ({subs or 'none'}); "
                     f"{r.retries} client retries; load average at start {r.load:.2f}")
        if not r.contender.startswith("raw"):
            lines.append(f"  operator requests from the first create on: {r.audit.operator_requests}")
            for call, n in r.audit.operator_calls.most_common(12):
                lines.append(f"    {n:7d}  {n / r.count:6.2f}/obj  {call}")
        lines.append("  all requests from the first create on, by user (agent):")
        for who, n in r.audit.by_user.most_common(8):
            lines.append(f"    {n:7d}  {who}")
        for what, n in r.audit.non_2xx.most_common(5):
            lines.append(f"  non-2xx: {n} x {what}")
    return "\n".join(lines)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), for telling machines apart in a note."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return "CPU model unknown"


def _per_object_ms(r: Result, name: str) -> float | None:
    return r.cpu[name] * 1000 / r.count if r.seconds and name in r.cpu else None


def explain(results: Sequence[Result]) -> list[str]:
    """Where each contender's cost per object goes, and what that allows Stead against raw.

    On a 2-core machine that the run keeps busy (`machine busy` near 100%), rates stand in about the
    inverse ratio of CPU per object, so Stead/raw is bounded by raw's CPU per object over Stead's. Stead's
    extra over raw splits into: its operator's own CPU; the API server's and etcd's work for the one Event
    per object (priced by `raw-events`, which posts the same Event beside raw's create and PATCH); and
    the rest (the API server serving the operator's watch, reading its PATCH).
    """
    present = list(dict.fromkeys(r.contender for r in results))
    parts = ("operator", "kube-apiserver", "etcd", "bench")
    part_ms = {part: medians(results, functools.partial(_per_object_ms, name=part)) for part in parts}
    costs = medians(results, lambda r: r.cpu_per_object if r.seconds else None)
    webhook_calls = medians(results, lambda r: sum(n for k, (n, _) in r.apiserver.items() if k.startswith("webhook "))
                            / r.count)
    webhook_ms = medians(results, lambda r: sum(t for k, (_, t) in r.apiserver.items() if k.startswith("webhook "))
                         * 1000 / r.count)
    first = {c: r for c in present if (r := next((r for r in results if r.contender == c and r.audit), None))}
    lines = ["", "Per object (medians of the runs): API writes in the run's namespace (audit log), admission "
                 "webhook calls and their time (API server metrics), CPU ms by process:"]
    header = ["contender", "writes", "Events", "webhook calls", "webhook ms", "operator", "apiserver", "etcd",
              "bench", "CPU ms/obj"]
    rows = [header]
    for c in present:
        audit = first[c].audit if c in first else None
        count = first[c].count if c in first else 1
        writes = sum(audit.writes.values()) / count if audit else None
        events = audit.writes.get("create events", 0) / count if audit else None
        rows.append([c, _fmt(writes, ".2f"), _fmt(events, ".2f"), _fmt(webhook_calls.get(c), ".3f"),
                     _fmt(webhook_ms.get(c), ".2f"),
                     *(_fmt(part_ms[p].get(c), ".2f") for p in parts), _fmt(costs.get(c), ".2f")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                               enumerate(zip(row, widths, strict=True))) for row in rows]
    for c in present:
        audit = first[c].audit if c in first else None
        if audit and audit.writes:
            mix = ", ".join(f"{k} {n / first[c].count:.2f}" for k, n in audit.writes.most_common(6))
            lines.append(f"  {c} writes per object: {mix}")
    for c in present:
        hooks = Counter[str]()
        for r in results:
            if r.contender == c:
                hooks.update({k.removeprefix("webhook "): int(n) for k, (n, _) in r.apiserver.items()
                              if k.startswith("webhook ")})
        if hooks:
            lines.append(f"  {c} admission webhook calls (all its runs): "
                         + ", ".join(f"{k} {n}" for k, n in hooks.most_common()))
    raw, with_events = costs.get("raw"), costs.get("raw-events")
    event_ms = with_events - raw if raw and with_events else None
    if event_ms is not None and raw and with_events:
        lines.append(f"An Event's cost to the API server, etcd and the client: {event_ms:.2f} ms CPU per object "
                     f"(raw-events {with_events:.2f} - raw {raw:.2f}); raw-events/raw by CPU {raw / with_events:.2f}")
    for c in ("stead-base", "stead"):
        total, operator = costs.get(c), part_ms["operator"].get(c)
        audit = first[c].audit if c in first else None
        if not total or not raw or operator is None:
            continue
        extra = total - raw
        line = (f"{c}: {total:.2f} ms CPU per object, {extra:.2f} beyond raw's {raw:.2f}: operator {operator:.2f}"
                f" ({operator / total:.0%} of the whole)")
        if event_ms is not None:
            rest = extra - operator - event_ms
            line += (f", Events' API work {event_ms:.2f} ({event_ms / total:.0%}), the rest {rest:.2f} "
                     f"({rest / total:.0%}: the API server serving the operator's watch, its PATCHes' answers)")
        lines.append(line)
        if audit and audit.writes:
            writes = sum(audit.writes.values())
            events = audit.writes.get("create events", 0)
            tail = {k: v * 1000 / first[c].count for k, v in first[c].cpu_after.items()}
            lines.append(f"  Events are {events / writes:.0%} of its API writes ({events} of {writes}); "
                         f"{audit.events_in_time} were posted before all were Ready, the last {audit.events_trail:.1f}"
                         f" s after (one at a time, off the hot path): the CPU above holds those only. After Ready,"
                         f" until the audit log was quiet: operator {tail.get('operator', 0):.2f},"
                         f" apiserver {tail.get('kube-apiserver', 0):.2f} ms per object more")
        bound = f"  so on busy cores {c}/raw <= raw/{c} by CPU = {raw / total:.2f}"
        if event_ms is not None:
            bound += f"; without Events it would be {raw / (total - event_ms):.2f}"
        bound += (f"; with an operator costing nothing {raw / (total - operator):.2f}; "
                  f"{TARGET_VS_RAW:.2f} needs at most {raw / TARGET_VS_RAW - raw:.2f} ms beyond raw")
        lines.append(bound)
    for c in present:
        run = next((r for r in results if r.contender == c and r.apiserver), None)
        if run is None:
            continue
        top = sorted(((k, n, t) for k, (n, t) in run.apiserver.items() if not k.startswith("webhook ")),
                     key=lambda item: -item[2])[:5]
        lines.append(f"  {c}: API server time by request (latency summed, not CPU): " + "; ".join(
            f"{k} {n / run.count:.2f}/obj x {t * 1000 / n:.1f} ms" for k, n, t in top))
    for c in present:
        run = next((r for r in results if r.contender == c and r.profile and c.startswith("stead")), None)
        if run is None:
            continue
        shares = dict(run.profile)
        lines.append(f"{c}: operator profile (py-spy, {int(shares.pop('samples'))} samples, a sample counts for "
                     f"every bucket its stack passes through):")
        lines += [f"    {share:6.1%}  {label}" for label, share in shares.items()]
    return lines


# --- main ------------------------------------------------------------------------------------


def with_agent(access: ClusterAccess) -> ClusterAccess:
    return replace(access, headers={**access.headers, "User-Agent": BENCH_AGENT})


async def bench(args: argparse.Namespace, target: Target, workdir: Path) -> list[Result]:
    access = with_agent(load_access(target.kubeconfig))
    spec = yaml.safe_load(EXAMPLE.read_text())["spec"]
    if KIND.check_spec(spec):
        raise SystemExit(f"{EXAMPLE} is not a valid Environment: {KIND.check_spec(spec)}")
    results: list[Result] = []
    async with KubeClient(access, concurrency=args.concurrency) as kube:
        await install_crds(kube, KINDS)
        if args.warmup:
            log(f"warm-up: {args.warmup} objects")
            await warm_up(kube, access, spec, args)
        for _ in range(args.repeat):  # interleaved, so a slow moment of the machine hits all alike
            for contender in [c for c in CONTENDERS if c in (args.only or CONTENDERS)
                              and (c != "stead-base" or args.stead_baseline is not None)]:
                results.append(await measure(contender, args, target, access, kube, spec, workdir))
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="Environments per contender (default 1000)")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight when creating (default 32)")
    parser.add_argument("--only", action="append", choices=CONTENDERS, help="run only this contender (repeatable)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every contender this many times, interleaved; ratios use medians")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds per contender before a timeout")
    parser.add_argument("--warmup", type=int, default=100, help="objects created (untimed) before the first run")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="after all are Ready, wait until the audit log is quiet this long (at most 30 s)")
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster instead of starting a local control plane")
    parser.add_argument("--audit-log", type=Path, help="that cluster's audit log (JSON), for PATCH counts")
    parser.add_argument("--home", type=Path, help="the local control plane's home (default: a temporary one)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the local control plane running")
    parser.add_argument("--apiserver-port", type=int, default=46443)
    parser.add_argument("--etcd-port", type=int, default=42379)
    parser.add_argument("--etcd-peer-port", type=int, default=42380)
    parser.add_argument("--controller-manager-port", type=int, default=40257)
    parser.add_argument("--stead-command", default=str(BIN / "stead"),
                        help="how to start Stead (shell words; `run ...` is appended)")
    parser.add_argument("--stead-pythonpath", help="put this first on Stead's PYTHONPATH (to try a modified copy)")
    parser.add_argument("--stead-baseline", type=Path, metavar="TREE",
                        help="also run contender `stead-base`: Stead from this tree (a `git worktree` of the "
                             "commit to compare with), interleaved with the others in the same run")
    parser.add_argument("--stead-webhook", choices=["local", "off"], default="local",
                        help="Stead's admission webhook: local (as `stead run` does by default) or off")
    parser.add_argument("--workdir", type=Path,
                        help="keep operator logs, stores and profiles here (default: a temporary directory)")
    parser.add_argument("--py-spy", type=Path, metavar="PATH",
                        help="profile each operator with this py-spy over the timed interval (into the workdir)")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds for an operator to become ready")
    parser.add_argument("--cleanup-timeout", type=float, default=300.0, help="seconds to wait for a namespace to go")
    parser.add_argument("--json", action="store_true",
                        help="print each run's figures as one JSON line instead of the report (bench/check.py)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.concurrency < 1 or args.repeat < 1:
        parser.error("--count, --concurrency and --repeat must be positive")
    if args.stead_baseline is not None and not (args.stead_baseline / "operators").is_dir():
        parser.error(f"--stead-baseline: {args.stead_baseline} holds no operators/ (give a tree of this repository)")
    return args


def result_json(result: Result) -> dict[str, Any]:
    """One run's figures for a machine (`--json`): the Result's fields, the rate and the CPU cost per object,
    and the machine's load average now."""
    audit = None if result.audit is None else dict(vars(result.audit))  # its Counters are dicts to json
    return {**vars(result), "audit": audit, "rate": result.rate, "cpu_per_object": result.cpu_per_object,
            "load_end": os.getloadavg()[0]}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="stead-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    plane = None
    results: list[Result] = []
    try:
        from operators.cluster import LocalControlPlane

        if args.kubeconfig is not None:
            pids: dict[str, int] = {}
            audit_log = args.audit_log
            if (args.kubeconfig.parent / "run").is_dir():  # a LocalControlPlane's home: pids and log are known
                plane_there = LocalControlPlane(args.kubeconfig.parent)
                pids = dict(plane_there.status().pids)
                audit_log = audit_log or plane_there.audit_log_path
            target = Target(args.kubeconfig, audit_log, pids)
        else:
            home = args.home or workdir / "cluster"
            plane = LocalControlPlane(home, apiserver_port=args.apiserver_port, etcd_client_port=args.etcd_port,
                                      etcd_peer_port=args.etcd_peer_port,
                                      controller_manager_port=args.controller_manager_port, progress=log)
            info = plane.up()
            target = Target(info.kubeconfig, info.audit_log, dict(plane.status().pids))
            log(f"local control plane at {info.server} (home {home})")
        args.loads = [os.getloadavg()]
        results = asyncio.run(bench(args, target, workdir))
        args.loads.append(os.getloadavg())
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        if plane is not None:
            if args.keep_cluster:
                log(f"control plane left running: KUBECONFIG={plane.kubeconfig_path}; stop it with "
                    f"STEAD_HOME={plane.home} stead cluster down")
            else:
                log("stopping the local control plane")
                plane.down()
        if args.workdir is None and not (args.keep_cluster and args.home is None):
            shutil.rmtree(workdir, ignore_errors=True)
    if not results:
        return 1
    print(json.dumps([result_json(r) for r in results]) if args.json else report(results, args))
    return 0 if all(r.seconds is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
