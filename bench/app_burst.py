"""App burst: N Apps created at once, from one file vs from parallel clients, until every one is Ready.

Issue 14 saw 300 Apps from one `kubectl apply -f` all Ready in 119 s, but the same 300 from 10
parallel `kubectl apply` clients only in 522 s: the operator's own admission webhook timed out
(`failed calling webhook "actionruns.stead.dev" ... context deadline exceeded`) while its
reconcilers held every connection, the refused creates backed off for minutes, and nothing bounded
how many runs (a runner process of ~50 MiB each) ran at once. This benchmark prints the figures
that say whether that is fixed:

- ``one-file``: one `kubectl apply -f` of a file with all N Apps;
- ``parallel``: `--clients` (10) `kubectl apply` processes at once, each with its share of N.

Both run against the same operator (the real one, ``stead run`` as a subprocess, admission
webhook included, ``--trust-local-namespaces`` for the benchmark's namespaces) and the same local
control plane, each in a fresh namespace holding one small Blueprint: a Local substrate and a
create action whose one task is a short script (``sleep 1; echo ok``), so each App costs one
ActionRun, one runner process and one script.

For each: the wall time from just before the first create until a WATCH (not a polling loop) has
seen every App ``Ready=True`` at its generation in phase Provisioned; webhook timeouts (``failed
calling webhook`` in kubectl's stderr and in the operator's log) and creates refused (kubectl's
errors, and non-2xx creates of Apps and ActionRuns in the API server's audit log); the peak number
of runs, from the operator's `/metrics` gauges ``stead_runs_running`` and ``stead_runs_queued``
sampled every 0.5 s, cross-checked by counting the runner processes (``python -m pipelines run``)
under the operator; and the peak memory, the RSS of the operator plus every process under it, from
/proc (shared pages are counted once per process, so it overstates a little). Targets (issue 14):
parallel within 1.5x of one-file, 0 webhook timeouts, and the bound on runs held.

It starts its own LocalControlPlane in a temporary home on free ports (never the user's cluster or
home) and always stops it and the operator; every wait has a deadline and a miss is reported,
never a hang. The helpers (operator process, watch, audit log, CPU accounting) are those of
``pipeline_throughput.py``.

    .venv/bin/python bench/app_burst.py [--count 300] [--clients 10] [--max-concurrent-runs N]
                                        [--deadline 600] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, Final

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import is_runner, local_plane, operator_session, processes
from bench.pipeline_throughput import (
    BIN,
    AuditMark,
    CpuSnapshot,
    OperatorProcess,
    ReadyWatch,
    Target,
    audit_mark,
    create_namespace,
    delete_namespace,
    log,
    read_audit_between,
)
from operators import API_VERSION
from operators.calm.blueprint import KIND as BLUEPRINT_KIND
from operators.calm.models import ACTIONRUN, APP, BLUEPRINT
from operators.runtime.engine.slots import default_limit
from operators.runtime.kube.client import ClusterAccess, KubeClient, custom_path

SCENARIOS: Final = ("one-file", "parallel")
NAMESPACE_PREFIX: Final = "burst"
BLUEPRINT_NAME: Final = "burst"
TARGET_RATIO: Final = 1.5
WEBHOOK_FAILURE: Final = "failed calling webhook"
METRICS_TIMEOUT: Final = 5.0


def blueprint_spec(script: str) -> dict[str, Any]:
    """One Local substrate, one service whose create action is one short script."""
    return {
        "active": True,
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [
            {"name": "create", "tasks": [{"name": "hello", "type": "exec", "script": script}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
    }


def app_manifest(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": APP.kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"blueprint": BLUEPRINT_NAME}}


def shares(names: Sequence[str], clients: int) -> list[list[str]]:
    """`names` in `clients` contiguous pieces whose sizes differ by at most one (none empty)."""
    clients = min(clients, len(names))
    size, extra = divmod(len(names), clients)
    pieces, start = [], 0
    for i in range(clients):
        end = start + size + (1 if i < extra else 0)
        pieces.append(list(names[start:end]))
        start = end
    return pieces


# --- what is measured ------------------------------------------------------------------------


@dataclass
class Peaks:
    """What the sampler saw: maxima over the timed interval, and how many samples it took."""

    running: float = 0.0
    queued: float = 0.0
    runners: int = 0
    rss: int = 0
    """Bytes: the operator and every process under it."""
    operator_rss: int = 0
    samples: int = 0
    """Samples of the process tree."""
    metrics_samples: int = 0
    metrics_late: int = 0
    """Answers of `/metrics` that took longer than the interval (the operator's loop was busy)."""
    metrics_missed: int = 0
    """Requests to `/metrics` that failed or had no answer within `METRICS_TIMEOUT`."""
    gauge_series: list[tuple[float, float, float]] = field(default_factory=list)
    """(monotonic time, running, queued) of every answer."""
    tree_series: list[tuple[float, int, int]] = field(default_factory=list)
    """(monotonic time, runner processes, RSS bytes of the operator and its children)."""


@dataclass
class Result:
    scenario: str
    count: int
    clients: int
    namespace: str = ""
    seconds: float | None = None
    """From just before the first create until every App created was Ready; None: missed."""
    created_seconds: float | None = None
    """Until the last kubectl client had exited."""
    first_ready: float | None = None
    median_ready: float | None = None
    ready: int = 0
    created: int = 0
    refused: int = 0
    """App creates kubectl reported as failed (each attempt's)."""
    reapplies: int = 0
    kubectl_webhook_failures: int = 0
    kubectl_errors: list[str] = field(default_factory=list)
    operator_log: Counter[str] = field(default_factory=Counter)
    """Normalised warning/error lines of the operator over the interval -> count."""
    operator_examples: dict[str, str] = field(default_factory=dict)
    operator_webhook_failures: int = 0
    operator_timeouts: int = 0
    audit_creates: Counter[str] = field(default_factory=Counter)
    """`resource code [agent]` -> creates in the namespace, from the first create on."""
    create_latency: dict[str, list[float]] = field(default_factory=dict)
    """resource -> seconds the API server took for each create (webhooks included)."""
    peaks: Peaks = field(default_factory=Peaks)
    cpu: dict[str, float] = field(default_factory=dict)
    machine_busy: float | None = None
    load_start: float = 0.0
    load_end: float = 0.0
    error: str | None = None

    @property
    def webhook_failures(self) -> int:
        return self.kubectl_webhook_failures + self.operator_webhook_failures

    @property
    def refused_by_server(self) -> int:
        """Creates answered with an error (409 AlreadyExists aside: a retry of a create that was made)."""
        return sum(n for key, n in self.audit_creates.items() if key.split()[1][0] != "2" and key.split()[1] != "409")


class AppReadyWatch(ReadyWatch):
    """`ReadyWatch` on the namespace's Apps (Ready at their generation, phase Provisioned), which
    also records when each became Ready and can narrow what it waits for to the Apps created."""

    def __init__(self, access: ClusterAccess, namespace: str, names: Sequence[str]) -> None:
        super().__init__(access, namespace, names)
        self._path = custom_path(APP.plural, namespace)
        self.ready_at: dict[str, float] = {}

    def _see(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        super()._see(obj, deleted)
        name = (obj.get("metadata") or {}).get("name")
        if name in self.ready and name not in self.ready_at:
            self.ready_at[name] = time.monotonic()

    def expect(self, names: Sequence[str]) -> None:
        """Wait only for these (the Apps that were created; a refused one never becomes Ready)."""
        self._expected = frozenset(names)
        self.ready &= self._expected
        if len(self.ready) == len(self._expected):
            self.all_ready.set()


# --- sampling the operator ------------------------------------------------------------------


def tree_sample(root: int) -> tuple[int, int, int]:
    """(runner processes, RSS of `root` and everything under it, RSS of `root`) from /proc."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    runners, total, stack = 0, 0, [root]
    while stack:
        pid = stack.pop()
        if pid not in table:
            continue
        _, rss, argv = table[pid]
        total += rss
        runners += pid != root and is_runner(argv)
        stack.extend(children.get(pid, ()))
    return runners, total, table[root][1] if root in table else 0


async def read_gauges(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(url) as resp:
        text = await resp.text()
    return {sample.name: float(sample.value) for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name in ("stead_runs_running", "stead_runs_queued")}


async def sample(peaks: Peaks, operator_pid: int, metrics_url: str, interval: float) -> None:
    """Every `interval` seconds the gauges and, apart, the process tree; maxima into `peaks`. Cancel to stop.

    The two are sampled by loops of their own, so that an operator slow to answer `/metrics` (a busy
    event loop on a busy machine) delays only its gauge samples; a late answer still counts, and the
    next request goes out at once.
    """

    async def gauges() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT)) as http:
            next_tick = time.monotonic()
            while True:
                asked = time.monotonic()
                try:
                    found = await read_gauges(http, metrics_url)
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    peaks.metrics_missed += 1
                else:
                    peaks.metrics_samples += 1
                    peaks.gauge_series.append((asked, found.get("stead_runs_running", 0.0),
                                               found.get("stead_runs_queued", 0.0)))
                    peaks.metrics_late += time.monotonic() - asked > interval
                    peaks.running = max(peaks.running, found.get("stead_runs_running", 0.0))
                    peaks.queued = max(peaks.queued, found.get("stead_runs_queued", 0.0))
                next_tick = max(next_tick + interval, time.monotonic())
                await asyncio.sleep(next_tick - time.monotonic())  # a sampling period, not a wait

    async def tree() -> None:
        next_tick = time.monotonic()
        while True:
            runners, rss, operator_rss = await asyncio.to_thread(tree_sample, operator_pid)
            peaks.samples += 1
            peaks.tree_series.append((time.monotonic(), runners, rss))
            peaks.runners = max(peaks.runners, runners)
            peaks.rss = max(peaks.rss, rss)
            peaks.operator_rss = max(peaks.operator_rss, operator_rss)
            next_tick = max(next_tick + interval, time.monotonic())
            await asyncio.sleep(next_tick - time.monotonic())

    async with asyncio.TaskGroup() as group:
        group.create_task(gauges())
        group.create_task(tree())


# --- kubectl ---------------------------------------------------------------------------------


@dataclass
class Applied:
    created: set[str] = field(default_factory=set)
    """Names kubectl reported created (or unchanged/configured: there already)."""
    refused: int = 0
    webhook_failures: int = 0
    errors: list[str] = field(default_factory=list)
    attempts: int = 0


APPLIED_LINE: Final = re.compile(r"^\S+/(\S+) (created|unchanged|configured)$")


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.argv = [str(binary), "--kubeconfig", str(kubeconfig)]

    async def __call__(self, *args: str, input: bytes | None = None, within: float = 60.0) -> tuple[int, str, str]:
        """Run kubectl with a deadline: (exit code, stdout, stderr); on timeout it is killed (code -9)."""
        process = await asyncio.create_subprocess_exec(
            *self.argv, *args, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(process.communicate(input), max(0.1, within))
        except TimeoutError:
            return -9, "", f"kubectl {' '.join(args)}: no answer within {within:.0f}s"
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return process.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def apply(self, path: Path, expected: int, deadline: float, reapply: int, into: Applied) -> None:
        """`kubectl apply -f path`, again (idempotent) while some creates were refused, `reapply` times at most."""
        for attempt in range(1 + reapply):
            left = deadline - time.monotonic()
            if left <= 0:
                into.errors.append(f"{path.name}: deadline passed before attempt {attempt + 1}")
                return
            into.attempts += 1
            code, out, err = await self("apply", "-f", str(path), within=left)
            for line in out.splitlines():
                if match := APPLIED_LINE.match(line.strip()):
                    into.created.add(match.group(1))
            failed = [line for line in err.splitlines() if line.strip()]
            into.refused += sum("error when" in line for line in failed)
            into.webhook_failures += err.count(WEBHOOK_FAILURE)
            into.errors.extend(failed)
            if code == 0 and len(into.created) >= expected:
                return


# --- the operator's log and the audit log ----------------------------------------------------


NOISE: Final = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uid>"),
    (re.compile(rf"\b{NAMESPACE_PREFIX}-[a-z-]+-[0-9a-f]{{6}}\b"), "<ns>"),
    (re.compile(r"\bapp-\d{5}\b"), "app-#"),
    (re.compile(r"\d+(\.\d+)?"), "#"),
]


def normalise(line: str) -> str:
    """A log line without its timestamp, names and numbers, to count lines of the same kind."""
    for pattern, replacement in NOISE:
        line = pattern.sub(replacement, line)
    return line.strip()[:200]


def is_notable(line: str) -> bool:
    lowered = line.lower()
    return any(word in lowered for word in ("warning", "error", "exception", "traceback", "timeout", "timed out",
                                            "failed", "refused", "retry"))


def scan_operator_log(path: Path, offset: int, result: Result) -> None:
    try:
        with open(path, "rb") as stream:
            stream.seek(offset)
            text = stream.read().decode(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        result.operator_webhook_failures += line.count(WEBHOOK_FAILURE)
        result.operator_timeouts += "TimeoutError" in line or "context deadline exceeded" in line
        if is_notable(line):
            key = normalise(line)
            result.operator_log[key] += 1
            result.operator_examples.setdefault(key, line.strip()[:400])


def audit_creates(path: Path | None, start: AuditMark, namespace: str) -> tuple[Counter[str], dict[str, list[float]]]:
    """Creates of Apps and ActionRuns in `namespace`, by resource, response code and user agent, and
    how long the API server took to answer each (admission webhooks included), by resource."""
    found: Counter[str] = Counter()
    latencies: dict[str, list[float]] = {}
    if path is None:
        return found, latencies
    for event in read_audit_between(path, start):
        ref = event.get("objectRef") or {}
        if (event.get("verb") != "create" or event.get("stage") != "ResponseComplete"
                or ref.get("namespace") != namespace or ref.get("resource") not in (APP.plural, ACTIONRUN.plural)):
            continue
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        agent = str(event.get("userAgent") or "?").split("/", 1)[0]
        found[f"{ref['resource']} {code} [{agent}]"] += 1
        with contextlib.suppress(KeyError, ValueError):
            took = (datetime.fromisoformat(event["stageTimestamp"]) -
                    datetime.fromisoformat(event["requestReceivedTimestamp"])).total_seconds()
            latencies.setdefault(str(ref["resource"]), []).append(took)
    return found, latencies


def write_series(path: Path, started: float, peaks: Peaks) -> None:
    """The samples, for a look at how runs and memory moved (seconds from the first create)."""
    rows = ["seconds,source,running,queued,runner_processes,rss_mib"]
    rows += [f"{t - started:.2f},gauges,{running:.0f},{queued:.0f},," for t, running, queued in peaks.gauge_series]
    rows += [f"{t - started:.2f},processes,,,{runners},{rss / 2**20:.0f}" for t, runners, rss in peaks.tree_series]
    path.write_text("\n".join(rows) + "\n")


# --- one scenario ----------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    target: Target
    access: ClusterAccess
    kube: KubeClient
    kubectl: Kubectl
    operator: OperatorProcess
    metrics_url: str
    workdir: Path

    async def prepare_namespace(self, prefix: str) -> str:
        """A fresh namespace with the Active, Ready blueprint in it."""
        namespace = await create_namespace(self.kube, f"{NAMESPACE_PREFIX}-{prefix}")
        body = {"apiVersion": API_VERSION, "kind": BLUEPRINT.kind,
                "metadata": {"name": BLUEPRINT_NAME, "namespace": namespace}, "spec": blueprint_spec(self.args.script)}
        code, _, err = await self.kubectl("apply", "-f", "-", input=json.dumps(body).encode(), within=60)
        if code != 0:
            raise RuntimeError(f"the blueprint was refused: {err.strip()}")
        code, _, err = await self.kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout=60s",
                                          f"{BLUEPRINT.plural}/{BLUEPRINT_NAME}", within=70)
        if code != 0:
            raise RuntimeError(f"the blueprint was not Ready within 60s: {err.strip()}")
        return namespace

    async def warm_up(self) -> None:
        """A few Apps first (untimed), so that neither scenario pays for the first runner's cold start."""
        count = self.args.warmup
        if not count:
            return
        log(f"warm-up: {count} Apps")
        namespace = await self.prepare_namespace("warmup")
        try:
            names = [f"app-{i:05d}" for i in range(count)]
            path = self.workdir / "warmup.yaml"
            path.write_text(yaml.safe_dump_all([app_manifest(n, namespace) for n in names]))
            code, _, err = await self.kubectl("apply", "-f", str(path), within=60)
            if code != 0:
                log(f"warm-up apply failed: {err.strip()}")
            code, _, err = await self.kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout=120s",
                                              "--all", APP.plural, within=130)
            if code != 0:
                log(f"warm-up Apps not all Ready within 120s: {err.strip()}")
        finally:
            await delete_namespace(self.kube, self.access, namespace, self.args.cleanup_timeout)

    async def run(self, scenario: str) -> Result:
        clients = 1 if scenario == "one-file" else self.args.clients
        result = Result(scenario, self.args.count, min(clients, self.args.count))
        tasks: list[asyncio.Task[Any]] = []
        namespace = ""
        try:
            namespace = result.namespace = await self.prepare_namespace(scenario)
            names = [f"app-{i:05d}" for i in range(self.args.count)]
            files = []
            for i, piece in enumerate(shares(names, clients)):
                path = self.workdir / f"{scenario}-{i:02d}.yaml"
                path.write_text(yaml.safe_dump_all([app_manifest(n, namespace) for n in piece]))
                files.append((path, len(piece)))

            watch = AppReadyWatch(self.access, namespace, names)
            watcher = asyncio.create_task(watch.run())
            tasks.append(watcher)
            opened = asyncio.create_task(watch.established.wait())
            tasks.append(opened)
            await asyncio.wait({watcher, opened}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            if not watch.established.is_set():
                raise RuntimeError(f"the watch on {namespace} did not open: "
                                   f"{watcher.exception() if watcher.done() else 'no answer in 30s'}")

            peaks = result.peaks
            operator_pid = self.operator.pid
            assert operator_pid is not None
            log_offset = self.operator.log_path.stat().st_size
            audit_start = audit_mark(self.target)
            result.load_start = os.getloadavg()[0]
            log(f"{scenario}: {self.args.count} Apps in {namespace} from {len(files)} kubectl client(s) "
                f"(load average {result.load_start:.2f})")
            sampler = asyncio.create_task(sample(peaks, operator_pid, self.metrics_url, self.args.interval))
            tasks.append(sampler)
            pids = {**self.target.pids, "operator": operator_pid}
            before = CpuSnapshot.take(pids)
            started = time.monotonic()
            deadline = started + self.args.deadline
            applied = [Applied() for _ in files]

            async def create_all() -> None:
                await asyncio.gather(*(self.kubectl.apply(path, n, deadline, self.args.reapply, into)
                                       for (path, n), into in zip(files, applied, strict=True)))
                result.created_seconds = time.monotonic() - started

            creating = asyncio.create_task(create_all())
            tasks.append(creating)
            all_ready = asyncio.create_task(watch.all_ready.wait())
            tasks.append(all_ready)
            while not all_ready.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                watched = {all_ready, watcher} | ({creating} if not creating.done() else set())
                done, _ = await asyncio.wait(watched, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if creating in done:
                    if creating.exception() is not None:
                        raise RuntimeError(f"creating failed: {creating.exception()!r}")
                    created = set().union(*(a.created for a in applied))
                    if any(a.refused for a in applied) and 0 < len(created) < len(names):
                        result.error = f"{len(names) - len(created)} creates refused for good"
                        watch.expect(sorted(created))  # a refused App never becomes Ready: wait for the others
                if watcher in done:
                    raise RuntimeError(f"the watch ended: {watcher.exception()!r}")
            if all_ready.done():
                result.seconds = time.monotonic() - started
            else:
                result.error = f"timeout after {self.args.deadline:.0f}s"
                log(f"{scenario}: missed the deadline; operator log tail:\n{self.operator.log_tail()}")
            sampler.cancel()
            after = CpuSnapshot.take(pids)
            result.cpu, result.machine_busy = after.since(before)
            result.load_end = os.getloadavg()[0]
            result.ready = len(watch.ready)
            ready_times = sorted(t - started for t in watch.ready_at.values())
            if ready_times:
                result.first_ready = ready_times[0]
                result.median_ready = ready_times[len(ready_times) // 2]
            result.created = len(set().union(*(a.created for a in applied)))
            result.refused = sum(a.refused for a in applied)
            result.reapplies = sum(a.attempts for a in applied) - len(applied)
            result.kubectl_webhook_failures = sum(a.webhook_failures for a in applied)
            result.kubectl_errors = [line for a in applied for line in a.errors]
            log(f"{scenario}: {result.ready}/{result.count} Ready"
                + (f" in {result.seconds:.1f}s" if result.seconds else f" ({result.error})")
                + f"; peak runs {peaks.running:.0f} running, {peaks.queued:.0f} queued, {peaks.runners} runner "
                f"processes; peak RSS {peaks.rss / 2**20:.0f} MiB")
            scan_operator_log(self.operator.log_path, log_offset, result)
            result.audit_creates, result.create_latency = await asyncio.to_thread(
                audit_creates, self.target.audit_log, audit_start, namespace)
            write_series(self.workdir / f"{scenario}-samples.csv", started, peaks)
        except Exception as error:  # one scenario failing must not take the other down
            result.error = f"{type(error).__name__}: {error}"
            log(f"{scenario} failed: {result.error}\noperator log tail:\n{self.operator.log_tail()}")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if namespace:
                await delete_namespace(self.kube, self.access, namespace, self.args.cleanup_timeout)
        return result


# --- the report ------------------------------------------------------------------------------


def limit_text(args: argparse.Namespace) -> tuple[str, int]:
    """How the operator was told to bound runs, and the bound that means on this host."""
    if args.max_concurrent_runs:
        return f"--max-concurrent-runs {args.max_concurrent_runs}", int(args.max_concurrent_runs)
    limit = default_limit()
    return f"auto (not passed; the operator's default on this host: {limit})", limit


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def report(results: Sequence[Result], args: argparse.Namespace) -> str:
    """One column per scenario, then the targets and what the operator logged."""
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("Apps (N)", lambda r: str(r.count)),
        ("kubectl clients", lambda r: str(r.clients)),
        ("all created, s", lambda r: _fmt(r.created_seconds, ".1f")),
        ("first Ready, s", lambda r: _fmt(r.first_ready, ".1f")),
        ("half Ready, s", lambda r: _fmt(r.median_ready, ".1f")),
        ("ALL READY, s", lambda r: _fmt(r.seconds, ".1f") if r.seconds else (r.error or "failed")[:40]),
        ("Ready", lambda r: f"{r.ready}/{r.count}"),
        ("App creates refused (kubectl)", lambda r: str(r.refused)),
        ("creates refused (audit, non-2xx)", lambda r: str(r.refused_by_server)),
        ("kubectl re-applies", lambda r: str(r.reapplies)),
        ("webhook failures, kubectl", lambda r: str(r.kubectl_webhook_failures)),
        ("webhook failures, operator log", lambda r: str(r.operator_webhook_failures)),
        ("timeouts in operator log", lambda r: str(r.operator_timeouts)),
        ("peak runs running (gauge)", lambda r: f"{r.peaks.running:.0f}"),
        ("peak runs queued (gauge)", lambda r: f"{r.peaks.queued:.0f}"),
        ("peak runner processes", lambda r: str(r.peaks.runners)),
        ("peak RSS operator+children, MiB", lambda r: f"{r.peaks.rss / 2**20:.0f}"),
        ("peak RSS operator alone, MiB", lambda r: f"{r.peaks.operator_rss / 2**20:.0f}"),
        ("operator CPU, s", lambda r: _fmt(r.cpu.get("operator"), ".1f")),
        ("apiserver CPU, s", lambda r: _fmt(r.cpu.get("kube-apiserver"), ".1f")),
        ("others CPU (runners, kubectl, rest), s", lambda r: _fmt(r.cpu.get("others"), ".1f")),
        ("machine busy", lambda r: _fmt(r.machine_busy * 100 if r.machine_busy is not None else None, ".0f") + "%"),
        ("load average start -> end", lambda r: f"{r.load_start:.2f} -> {r.load_end:.2f}"),
    ]
    table = [["", *(r.scenario for r in results)], *([label, *(cell(r) for r in results)] for label, cell in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                strict=True)))
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text, limit = limit_text(args)
    lines += ["", f"runs bound: {text}; script {args.script!r}; {os.cpu_count()} CPUs"]
    by_name = {r.scenario: r for r in results}
    one, par = by_name.get("one-file"), by_name.get("parallel")
    if one is not None and par is not None:
        if one.seconds and par.seconds:
            ratio = par.seconds / one.seconds
            verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
            lines.append(f"parallel/one-file: {ratio:.2f}x (target <= {TARGET_RATIO}x: {verdict})")
        else:
            lines.append(f"parallel/one-file: - (a scenario did not finish; target <= {TARGET_RATIO}x: MISSED)")
    timeouts = sum(r.webhook_failures for r in results)
    refused = sum(r.refused_by_server for r in results)
    lines.append(f"webhook timeouts: {timeouts} (target 0: {'met' if timeouts == 0 else 'MISSED'}); "
                 f"creates refused: {refused} (non-2xx creates of Apps and ActionRuns in the audit log, 409 aside), "
                 f"of Apps as kubectl reported them: {sum(r.refused for r in results)}")
    for r in results:
        gauge_ok = r.peaks.running <= limit
        procs_ok = r.peaks.runners <= limit
        lines.append(f"{r.scenario}: bound held: peak runs {r.peaks.running:.0f} <= limit {limit}: "
                     f"{'yes' if gauge_ok else 'NO'}; runner processes {r.peaks.runners} <= {limit}: "
                     f"{'yes' if procs_ok else 'NO'} ({r.peaks.metrics_samples} gauge samples, {r.peaks.metrics_late} "
                     f"answered later than {args.interval}s, {r.peaks.metrics_missed} missed; {r.peaks.samples} "
                     "process samples)")
    for r in results:
        lines += ["", f"{r.scenario} ({r.namespace or '-'}):"]
        if r.error:
            lines.append(f"  error: {r.error}")
        lines.append("  creates in the audit log (resource code [agent]): "
                     + (", ".join(f"{k} x{n}" for k, n in sorted(r.audit_creates.items())) or "none"))
        for resource, took in sorted(r.create_latency.items()):
            ordered = sorted(took)
            lines.append(f"  {resource} create latency at the API server (admission included): p50 "
                         f"{ordered[len(ordered) // 2]:.2f}s, p99 {ordered[int(len(ordered) * 0.99)]:.2f}s, "
                         f"max {ordered[-1]:.2f}s")
        for line in r.kubectl_errors[:5]:
            lines.append(f"  kubectl: {line[:300]}")
        if len(r.kubectl_errors) > 5:
            lines.append(f"  kubectl: ... {len(r.kubectl_errors) - 5} more error lines")
        lines.append(f"  operator log: {r.operator_webhook_failures} x '{WEBHOOK_FAILURE}', {r.operator_timeouts} "
                     f"lines with TimeoutError / context deadline exceeded; notable lines by kind:")
        for key, n in r.operator_log.most_common(8):
            lines.append(f"    {n:6d}  {r.operator_examples[key]}")
        if not r.operator_log:
            lines.append("         none")
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, target: Target, workdir: Path, kubectl_binary: Path) -> list[Result]:
    results: list[Result] = []
    extra = ["--max-concurrent-runs", str(args.max_concurrent_runs)] if args.max_concurrent_runs else []
    async with operator_session(args, target, workdir, NAMESPACE_PREFIX, extra) as session:
        operator = session.operator
        metrics_url = operator.health_url.rsplit("/", 1)[0] + "/metrics"
        log(f"operator pid {operator.pid}; runs bound: {limit_text(args)[0]}")
        run = Bench(args, target, session.access, session.kube, Kubectl(kubectl_binary, target.kubeconfig),
                    operator, metrics_url, workdir)
        await run.warm_up()
        for scenario in SCENARIOS:
            if scenario in (args.only or SCENARIOS):
                results.append(await run.run(scenario))
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=300, help="Apps per scenario (default 300)")
    parser.add_argument("--clients", type=int, default=10, help="parallel kubectl clients (default 10)")
    parser.add_argument("--max-concurrent-runs", type=int, default=0, metavar="N",
                        help="passed to the operator (default: not passed, the operator chooses)")
    parser.add_argument("--deadline", type=float, default=600.0,
                        help="seconds per scenario from the first create before a timeout (default 600)")
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="run only this scenario (repeatable)")
    parser.add_argument("--script", default="sleep 1; echo ok", help="the create action's script")
    parser.add_argument("--warmup", type=int, default=3, help="Apps created (untimed) before the first scenario")
    parser.add_argument("--reapply", type=int, default=2,
                        help="re-run a client's `kubectl apply` this many times at most while creates are refused")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples of runs and memory")
    parser.add_argument("--workdir", type=Path,
                        help="keep the operator's log, store, the manifests and the control plane's home here "
                             "(default: a temporary directory, removed)")
    parser.add_argument("--stead-command", default=str(BIN / "stead"),
                        help="how to start Stead (shell words; `run ...` is appended)")
    parser.add_argument("--stead-pythonpath", help="put this first on Stead's PYTHONPATH (to try a modified copy)")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds for the operator to become ready")
    parser.add_argument("--cleanup-timeout", type=float, default=300.0, help="seconds to wait for a namespace to go")
    parser.set_defaults(stead_webhook="local")  # what `stead_operator` reads: the webhook is under test
    args = parser.parse_args(argv)
    if args.count < 1 or args.clients < 1 or args.max_concurrent_runs < 0 or args.deadline <= 0:
        parser.error("--count and --clients must be positive, --max-concurrent-runs not negative")
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` cleans up as Ctrl-C does (in asyncio: see `bench`)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="stead-burst-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    try:
        problems = BLUEPRINT_KIND.check_spec(blueprint_spec(args.script))
        if problems:
            raise SystemExit(f"the blueprint is not valid: {problems}")
        with local_plane(workdir) as (target, binaries):
            results = asyncio.run(bench(args, target, workdir, binaries.kubectl))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if not results:
        return 1
    print(report(results, args))
    return 0 if all(r.seconds is not None and r.ready == r.count for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
