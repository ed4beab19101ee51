"""Service lifecycle: N ServiceInstances created at once until all are `up`, beside the same N Apps.

Issue 15: N = 200 ServiceInstances (``--count``) of one ServiceEntity following the built-in lifecycle
``simple``, each realized by an App of a one-task Blueprint (a Local substrate, a create action whose
one task is ``sleep 0.2; echo ok``), created at once (``--concurrency`` creates in flight); the clock
stops when a WATCH has seen every instance in state ``up``. Beside it, in a namespace of its own, the
same N Apps launched directly from the same Blueprint, until every one is Ready: the difference is the
lifecycle's own cost (validation, promote, the App launched by the operator, the resource-based
transfer).

Also printed, from the API server's audit log: the PATCHes of ServiceInstances in the namespace (any
subresource, by user agent) over the visible transfers (the entries of the instances' `status.log`) and
over the triggers (those entries that are not `auto`: create and resource_based here; the auto
transfers that follow a trigger in one reconcile share its write).

Targets (issue 15): <= 1 status PATCH per trigger; the lifecycle adding <= 20% to the Apps' own time.

It starts its own LocalControlPlane in a temporary home on free ports and the real operator (``stead
run``, admission webhook included, ``--trust-local-namespaces 'svc-*'``), and stops both; every wait has
a deadline. The helpers are those of ``pipeline_throughput.py`` and ``app_burst.py``.

    .venv/bin/python bench/service_lifecycle.py [--count 200] [--concurrency 32] [--deadline 600]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.app_burst import AppReadyWatch, blueprint_spec
from bench.harness import local_plane, operator_session
from bench.pipeline_throughput import (
    BIN,
    ReadyWatch,
    Target,
    audit_mark,
    create_namespace,
    delete_namespace,
    log,
    read_audit_between,
)
from operators import API_VERSION
from operators.calm.models import APP, BLUEPRINT
from operators.lsm.models import SERVICE_ENTITY, SERVICE_INSTANCE
from operators.runtime.kube.client import ApiError, ClusterAccess, KubeClient, custom_path

PREFIX: Final = "svc"
BLUEPRINT_NAME: Final = "one-task"
ENTITY_NAME: Final = "bench"
TARGET_PATCHES_PER_TRIGGER: Final = 1.0
TARGET_OVERHEAD: Final = 0.20


@dataclass
class Result:
    scenario: str
    count: int
    seconds: float | None = None
    done: int = 0
    error: str | None = None
    namespace: str = ""
    patches: Counter[str] = field(default_factory=Counter)
    """PATCHes of the scenario's kind in its namespace, by `subresource [agent]`."""
    transfers: int = 0
    triggers: int = 0
    by_trigger: Counter[str] = field(default_factory=Counter)

    @property
    def patch_total(self) -> int:
        return sum(self.patches.values())


def entity_body(namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": SERVICE_ENTITY.kind,
            "metadata": {"name": ENTITY_NAME, "namespace": namespace},
            "spec": {"attributes": [{"name": "name", "type": "string"}], "identity": "name",
                     "lifecycle": {"builtin": "simple"}, "realization": {"blueprint": BLUEPRINT_NAME}}}


def instance_body(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": SERVICE_INSTANCE.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"entity": ENTITY_NAME, "attributes": {"name": name}}}


def app_body(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": APP.kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"blueprint": BLUEPRINT_NAME}}


class UpWatch(ReadyWatch):
    """`ReadyWatch` on the namespace's ServiceInstances: done when every one is in state `up`."""

    def __init__(self, access: ClusterAccess, namespace: str, names: Sequence[str]) -> None:
        super().__init__(access, namespace, names)
        self._path = custom_path(SERVICE_INSTANCE.plural, namespace)

    def _see(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if name not in self._expected:
            return
        if not deleted and (obj.get("status") or {}).get("state") == "up":
            self.ready.add(name)
        else:
            self.ready.discard(name)
        if len(self.ready) == len(self._expected):
            self.all_ready.set()


async def wait_ready(kube: KubeClient, plural: str, namespace: str, name: str, within: float) -> None:
    """Set-up only (untimed): until the object's Ready condition is True."""
    deadline = time.monotonic() + within
    while True:
        obj = await kube.request("GET", custom_path(plural, namespace, name))
        ready = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
        if ready and ready[0].get("status") == "True":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{plural}/{name} not Ready within {within:.0f}s: {obj.get('status')}")
        await asyncio.sleep(0.2)


async def create_all(kube: KubeClient, plural: str, bodies: Sequence[dict[str, Any]], concurrency: int) -> int:
    """POST every body, `concurrency` in flight; returns how many were refused."""
    gate = asyncio.Semaphore(concurrency)
    refused = 0

    async def one(body: dict[str, Any]) -> None:
        nonlocal refused
        async with gate:
            try:
                await kube.request("POST", custom_path(plural, body["metadata"]["namespace"]), body)
            except ApiError as error:
                refused += 1
                if refused <= 3:
                    log(f"create of {body['metadata']['name']} refused: {error}")

    await asyncio.gather(*(one(b) for b in bodies))
    return refused


def audit_patches(target: Target, start: Any, namespace: str, resource: str) -> Counter[str]:
    found: Counter[str] = Counter()
    if target.audit_log is None:
        return found
    for event in read_audit_between(target.audit_log, start):
        ref = event.get("objectRef") or {}
        if (event.get("verb") != "patch" or event.get("stage") != "ResponseComplete"
                or ref.get("namespace") != namespace or ref.get("resource") != resource):
            continue
        agent = str(event.get("userAgent") or "?").split("/", 1)[0]
        found[f"{ref.get('subresource') or '-'} [{agent}]"] += 1
    return found


@dataclass
class Bench:
    args: argparse.Namespace
    target: Target
    access: ClusterAccess
    kube: KubeClient

    async def prepare(self, scenario: str) -> str:
        namespace = await create_namespace(self.kube, f"{PREFIX}-{scenario}")
        body = {"apiVersion": API_VERSION, "kind": BLUEPRINT.kind,
                "metadata": {"name": BLUEPRINT_NAME, "namespace": namespace}, "spec": blueprint_spec(self.args.script)}
        await self.kube.request("POST", custom_path(BLUEPRINT.plural, namespace), body)
        await wait_ready(self.kube, BLUEPRINT.plural, namespace, BLUEPRINT_NAME, 60)
        return namespace

    async def timed(self, result: Result, watch: ReadyWatch, create: Callable[[], Awaitable[int]]) -> None:
        watcher = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(watch.established.wait(), 30)
            started = time.monotonic()
            refused = await create()
            if refused:
                result.error = f"{refused} creates refused"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.all_ready.wait(), max(0.1, self.args.deadline - (time.monotonic()
                                                                                                - started)))
            result.done = len(watch.ready)
            if watch.all_ready.is_set():
                result.seconds = time.monotonic() - started
            else:
                result.error = f"timeout after {self.args.deadline:.0f}s ({result.done}/{result.count} done)"
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def apps(self) -> Result:
        result = Result("apps", self.args.count)
        try:
            namespace = result.namespace = await self.prepare("apps")
            if self.args.warmup:  # the first runner's cold start is no one's cost
                warm = [f"warm-{i}" for i in range(self.args.warmup)]
                await create_all(self.kube, APP.plural, [app_body(n, namespace) for n in warm], 8)
                for name in warm:
                    await wait_ready(self.kube, APP.plural, namespace, name, 120)
            names = [f"app-{i:05d}" for i in range(self.args.count)]
            start = audit_mark(self.target)
            await self.timed(result, AppReadyWatch(self.access, namespace, names), lambda: create_all(
                self.kube, APP.plural, [app_body(n, namespace) for n in names], self.args.concurrency))
            result.patches = await asyncio.to_thread(audit_patches, self.target, start, namespace, APP.plural)
        except Exception as error:
            result.error = f"{type(error).__name__}: {error}"
        log(f"apps: {result.done}/{result.count} Ready in {result.seconds or float('nan'):.1f}s {result.error or ''}")
        return result

    async def services(self) -> Result:
        result = Result("services", self.args.count)
        try:
            namespace = result.namespace = await self.prepare("services")
            await self.kube.request("POST", custom_path(SERVICE_ENTITY.plural, namespace), entity_body(namespace))
            await wait_ready(self.kube, SERVICE_ENTITY.plural, namespace, ENTITY_NAME, 60)
            names = [f"si-{i:05d}" for i in range(self.args.count)]
            start = audit_mark(self.target)
            await self.timed(result, UpWatch(self.access, namespace, names), lambda: create_all(
                self.kube, SERVICE_INSTANCE.plural, [instance_body(n, namespace) for n in names],
                self.args.concurrency))
            await asyncio.sleep(self.args.settle)  # writes still under way once all are up are counted too
            result.patches = await asyncio.to_thread(audit_patches, self.target, start, namespace,
                                                     SERVICE_INSTANCE.plural)
            listed = await self.kube.request("GET", custom_path(SERVICE_INSTANCE.plural, namespace))
            for item in listed.get("items") or []:
                for entry in (item.get("status") or {}).get("log") or []:
                    result.transfers += 1
                    result.by_trigger[str(entry.get("trigger"))] += 1
                    result.triggers += entry.get("trigger") != "auto"
        except Exception as error:
            result.error = f"{type(error).__name__}: {error}"
        log(f"services: {result.done}/{result.count} up in {result.seconds or float('nan'):.1f}s "
            f"{result.error or ''}")
        return result


def report(apps: Result, services: Result, args: argparse.Namespace) -> str:
    def secs(r: Result) -> str:
        return f"{r.seconds:.1f}" if r.seconds is not None else (r.error or "failed")

    lines = [f"N = {args.count}, script {args.script!r}, {args.concurrency} creates in flight, {os.cpu_count()} CPUs",
             f"{'':34}{'apps':>12}{'services':>12}",
             f"{'all done (Ready / up), s':34}{secs(apps):>12}{secs(services):>12}",
             f"{'per object, ms':34}{_per(apps):>12}{_per(services):>12}",
             f"{'PATCHes of the kind (audit)':34}{apps.patch_total:>12}{services.patch_total:>12}"]
    for key, n in sorted(services.patches.items()):
        lines.append(f"  services: PATCH {key}: {n}")
    for key, n in sorted(apps.patches.items()):
        lines.append(f"  apps: PATCH {key}: {n}")
    status_patches = sum(n for key, n in services.patches.items() if key.startswith("status "))
    lines.append(f"visible transfers (status.log): {services.transfers} "
                 f"({', '.join(f'{k} {n}' for k, n in sorted(services.by_trigger.items()))}); "
                 f"triggers (not auto): {services.triggers}")
    if services.transfers and services.triggers:
        per_transfer = status_patches / services.transfers
        per_trigger = status_patches / services.triggers
        verdict = "met" if per_trigger <= TARGET_PATCHES_PER_TRIGGER else "MISSED"
        lines.append(f"status PATCHes: {status_patches}: {per_transfer:.2f} per visible transfer, {per_trigger:.2f} "
                     f"per trigger (target <= {TARGET_PATCHES_PER_TRIGGER:.0f}: {verdict})")
    if apps.seconds and services.seconds:
        overhead = services.seconds / apps.seconds - 1
        verdict = "met" if overhead <= TARGET_OVERHEAD else "MISSED"
        lines.append(f"the lifecycle's own cost: {overhead * 100:+.0f}% over the Apps' time "
                     f"(target <= +{TARGET_OVERHEAD * 100:.0f}%: {verdict})")
    else:
        lines.append("the lifecycle's own cost: - (a scenario did not finish: MISSED)")
    return "\n".join(lines)


def _per(r: Result) -> str:
    return f"{r.seconds * 1000 / r.count:.0f}" if r.seconds else "-"


async def bench(args: argparse.Namespace, target: Target, workdir: Path) -> tuple[Result, Result] | None:
    async with operator_session(args, target, workdir, PREFIX, concurrency=max(8, args.concurrency)) as session:
        operator, kube = session.operator, session.kube
        run = Bench(args, target, session.access, kube)
        log(f"operator pid {operator.pid}")
        apps = await run.apps()
        services = await run.services()
        if apps.error or services.error:
            log(f"operator log tail:\n{operator.log_tail()}")
        for result in (apps, services):
            if result.namespace:
                await delete_namespace(kube, session.access, result.namespace, args.cleanup_timeout)
        return apps, services


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="ServiceInstances, and Apps (default 200)")
    parser.add_argument("--concurrency", type=int, default=32, help="creates in flight (default 32)")
    parser.add_argument("--script", default="sleep 0.2; echo ok", help="the create task's script")
    parser.add_argument("--warmup", type=int, default=2, help="Apps created (untimed) first")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds after all are up before the audit log is read (default 2)")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds per scenario (default 600)")
    parser.add_argument("--workdir", type=Path, help="keep the operator's log and the control plane's home here")
    parser.add_argument("--stead-command", default=str(BIN / "stead"))
    parser.add_argument("--stead-pythonpath")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.add_argument("--cleanup-timeout", type=float, default=300.0)
    parser.set_defaults(stead_webhook="local")
    args = parser.parse_args(argv)
    if args.count < 1 or args.concurrency < 1:
        parser.error("--count and --concurrency must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="stead-svc-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = None
    try:
        with local_plane(workdir) as (target, _):
            results = asyncio.run(bench(args, target, workdir))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if results is None:
        return 1
    apps, services = results
    print(report(apps, services, args))
    return 0 if apps.seconds is not None and services.seconds is not None else 1


if __name__ == "__main__":
    sys.exit(main())
