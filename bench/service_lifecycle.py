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
    CpuSnapshot,
    ReadyWatch,
    Target,
    audit_mark,
    create_namespace,
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
STOCK_ENTITY: Final = "stock"
"""The inventory's entity (`--inventory`): the same attributes and identity, no realization (no App, no runner)."""
TARGET_PATCHES_PER_TRIGGER: Final = 1.0
TARGET_OVERHEAD: Final = 0.20
TARGET_FLAT: Final = 1.25
"""A transfer's cost at the largest inventory over the smallest (per trigger): up to this is flat (issue 31, item 9)."""


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
    refused: int = 0
    inventory: int = 0
    """Instances (of the unrealized entity `stock`) already up in the namespace before the timed creates."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds over the timed interval: the operator (without its runners), kube-apiserver, etcd, others."""
    load: str = ""

    @property
    def status_patches(self) -> int:
        return sum(n for key, n in self.patches.items() if key.startswith("status "))

    def per_trigger(self) -> dict[str, float]:
        """The figures that must stay flat as the inventory grows, per trigger (not auto)."""
        if not self.triggers or self.seconds is None:
            return {}
        return {"wall ms / trigger": self.seconds * 1e3 / self.triggers,
                **{f"{who} CPU ms / trigger": self.cpu[who] * 1e3 / self.triggers
                   for who in ("operator", "kube-apiserver", "etcd") if who in self.cpu},
                "status PATCHes / trigger": self.status_patches / self.triggers}

    @property
    def patch_total(self) -> int:
        return sum(self.patches.values())


def entity_body(namespace: str, name: str = ENTITY_NAME, realized: bool = True) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": SERVICE_ENTITY.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"attributes": [{"name": "name", "type": "string"}], "identity": "name",
                     "lifecycle": {"builtin": "simple"},
                     **({"realization": {"blueprint": BLUEPRINT_NAME}} if realized else {})}}


def instance_body(name: str, namespace: str, entity: str = ENTITY_NAME) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": SERVICE_INSTANCE.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"entity": entity, "attributes": {"name": name}}}


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

    def forget(self, names: Sequence[str]) -> None:
        """Stop waiting for these (their creates were refused: they will never be up)."""
        self._expected = self._expected - frozenset(names)
        self.ready &= self._expected
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


async def create_all(kube: KubeClient, plural: str, bodies: Sequence[dict[str, Any]], concurrency: int) -> list[str]:
    """POST every body, `concurrency` in flight; returns the names of those refused."""
    gate = asyncio.Semaphore(concurrency)
    refused: list[str] = []

    async def one(body: dict[str, Any]) -> None:
        async with gate:
            try:
                await kube.request("POST", custom_path(plural, body["metadata"]["namespace"]), body)
            except ApiError as error:
                refused.append(body["metadata"]["name"])
                if len(refused) <= 3:
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


def load() -> str:
    """The load average (1, 5, 15 min): other helpers' tests may share the machine."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Bench:
    args: argparse.Namespace
    target: Target
    access: ClusterAccess
    kube: KubeClient
    pids: Mapping[str, int]
    prefix: str = PREFIX

    async def prepare(self, scenario: str) -> str:
        namespace = await create_namespace(self.kube, f"{self.prefix}-{scenario}")
        body = {"apiVersion": API_VERSION, "kind": BLUEPRINT.kind,
                "metadata": {"name": BLUEPRINT_NAME, "namespace": namespace}, "spec": blueprint_spec(self.args.script)}
        await self.kube.request("POST", custom_path(BLUEPRINT.plural, namespace), body)
        await wait_ready(self.kube, BLUEPRINT.plural, namespace, BLUEPRINT_NAME, 60)
        return namespace

    async def timed(self, result: Result, watch: ReadyWatch, create: Callable[[], Awaitable[list[str]]]) -> None:
        watcher = asyncio.create_task(watch.run())
        deadline = self.args.deadline or max(600.0, 3.0 * result.count)
        try:
            await asyncio.wait_for(watch.established.wait(), 30)
            cpu = CpuSnapshot.take(self.pids)
            started = time.monotonic()
            refused = await create()
            if refused:
                result.refused = len(refused)
                result.error = f"{len(refused)} creates refused"
                if isinstance(watch, UpWatch):
                    watch.forget(refused)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.all_ready.wait(), max(0.1, deadline - (time.monotonic() - started)))
            result.done = len(watch.ready)
            if watch.all_ready.is_set():
                result.seconds = time.monotonic() - started
            else:
                result.error = f"timeout after {deadline:.0f}s ({result.done}/{result.count} done)"
            result.cpu, _ = CpuSnapshot.take(self.pids).since(cpu)
            result.load = load()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def apps(self, count: int) -> Result:
        result = Result("apps", count)
        try:
            namespace = result.namespace = await self.prepare("apps")
            if self.args.warmup:  # the first runner's cold start is no one's cost
                warm = [f"warm-{i}" for i in range(self.args.warmup)]
                await create_all(self.kube, APP.plural, [app_body(n, namespace) for n in warm], 8)
                for name in warm:
                    await wait_ready(self.kube, APP.plural, namespace, name, 120)
            names = [f"app-{i:05d}" for i in range(count)]
            start = audit_mark(self.target)
            await self.timed(result, AppReadyWatch(self.access, namespace, names), lambda: create_all(
                self.kube, APP.plural, [app_body(n, namespace) for n in names], self.args.concurrency))
            result.patches = await asyncio.to_thread(audit_patches, self.target, start, namespace, APP.plural)
        except Exception as error:
            result.error = f"{type(error).__name__}: {error}"
        log(f"apps: {result.done}/{result.count} Ready in {result.seconds or float('nan'):.1f}s (load {result.load}) "
            f"{result.error or ''}")
        return result

    async def stock(self, namespace: str, size: int) -> None:
        """Set-up (untimed): `size` instances of the unrealized entity, all up, before the timed creates."""
        await self.kube.request("POST", custom_path(SERVICE_ENTITY.plural, namespace),
                                entity_body(namespace, STOCK_ENTITY, realized=False))
        await wait_ready(self.kube, SERVICE_ENTITY.plural, namespace, STOCK_ENTITY, 60)
        names = [f"inv-{i:05d}" for i in range(size)]
        watch = UpWatch(self.access, namespace, names)
        watcher = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(watch.established.wait(), 30)
            started = time.monotonic()
            bodies = [instance_body(n, namespace, STOCK_ENTITY) for n in names]
            refused = await create_all(self.kube, SERVICE_INSTANCE.plural, bodies, self.args.concurrency)
            watch.forget(refused)
            await asyncio.wait_for(watch.all_ready.wait(), max(600.0, size * 1.0))
            log(f"inventory: {len(watch.ready)} instances up in {time.monotonic() - started:.1f}s "
                f"({len(refused)} creates refused; load {load()})")
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        await asyncio.sleep(self.args.settle)

    async def services(self, count: int, inventory: int = 0) -> Result:
        result = Result("services", count, inventory=inventory)
        try:
            namespace = result.namespace = await self.prepare(f"services{count}-{inventory}")
            await self.kube.request("POST", custom_path(SERVICE_ENTITY.plural, namespace), entity_body(namespace))
            await wait_ready(self.kube, SERVICE_ENTITY.plural, namespace, ENTITY_NAME, 60)
            if inventory:
                await self.stock(namespace, inventory)
            names = [f"si-{i:05d}" for i in range(count)]
            start = audit_mark(self.target)
            await self.timed(result, UpWatch(self.access, namespace, names), lambda: create_all(
                self.kube, SERVICE_INSTANCE.plural, [instance_body(n, namespace) for n in names],
                self.args.concurrency))
            await asyncio.sleep(self.args.settle)  # writes still under way once all are up are counted too
            result.patches = await asyncio.to_thread(audit_patches, self.target, start, namespace,
                                                     SERVICE_INSTANCE.plural)
            listed = await self.kube.request("GET", custom_path(SERVICE_INSTANCE.plural, namespace))
            mine = set(names)
            for item in listed.get("items") or []:
                if (item.get("metadata") or {}).get("name") not in mine:
                    continue  # the inventory's
                for entry in (item.get("status") or {}).get("log") or []:
                    result.transfers += 1
                    result.by_trigger[str(entry.get("trigger"))] += 1
                    result.triggers += entry.get("trigger") != "auto"
        except Exception as error:
            result.error = f"{type(error).__name__}: {error}"
        beside = f" (inventory {inventory})" if inventory else ""
        log(f"services{beside}: {result.done}/{result.count} up in {result.seconds or float('nan'):.1f}s "
            f"(load {result.load}) {result.error or ''}")
        return result


def report(apps: Result, services: Result, args: argparse.Namespace) -> str:
    """Issue 15's comparison at the smallest size: the services beside the same number of Apps."""
    def secs(r: Result) -> str:
        return f"{r.seconds:.1f}" if r.seconds is not None else (r.error or "failed")

    lines = [f"N = {services.count}, script {args.script!r}, {args.concurrency} creates in flight, "
             f"{os.cpu_count()} CPUs",
             f"{'':34}{'apps':>12}{'services':>12}",
             f"{'all done (Ready / up), s':34}{secs(apps):>12}{secs(services):>12}",
             f"{'per object, ms':34}{_per(apps):>12}{_per(services):>12}",
             f"{'load at the end (1 min)':34}{apps.load.split(' ')[0]:>12}{services.load.split(' ')[0]:>12}",
             f"{'PATCHes of the kind (audit)':34}{apps.patch_total:>12}{services.patch_total:>12}"]
    for key, n in sorted(services.patches.items()):
        lines.append(f"  services: PATCH {key}: {n}")
    for key, n in sorted(apps.patches.items()):
        lines.append(f"  apps: PATCH {key}: {n}")
    lines.append(f"visible transfers (status.log): {services.transfers} "
                 f"({', '.join(f'{k} {n}' for k, n in sorted(services.by_trigger.items()))}); "
                 f"triggers (not auto): {services.triggers}")
    if services.transfers and services.triggers:
        per_transfer = services.status_patches / services.transfers
        per_trigger = services.status_patches / services.triggers
        verdict = "met" if per_trigger <= TARGET_PATCHES_PER_TRIGGER else "MISSED"
        lines.append(f"status PATCHes: {services.status_patches}: {per_transfer:.2f} per visible transfer, "
                     f"{per_trigger:.2f} per trigger (target <= {TARGET_PATCHES_PER_TRIGGER:.0f}: {verdict})")
    if apps.seconds and services.seconds:
        overhead = services.seconds / apps.seconds - 1
        verdict = "met" if overhead <= TARGET_OVERHEAD else "MISSED"
        lines.append(f"the lifecycle's own cost: {overhead * 100:+.0f}% over the Apps' time "
                     f"(target <= +{TARGET_OVERHEAD * 100:.0f}%: {verdict})")
    else:
        lines.append("the lifecycle's own cost: - (a scenario did not finish: MISSED)")
    return "\n".join(lines)


def scaling_report(runs: Sequence[Result]) -> str:
    """Issue 31, item 9: a transfer's cost per trigger at each inventory size, and the largest over the smallest
    (flat: <= TARGET_FLAT)."""
    figures = [run.per_trigger() for run in runs]
    names = [name for name in figures[0]] if figures and figures[0] else [
        "wall ms / trigger", "operator CPU ms / trigger", "kube-apiserver CPU ms / trigger", "etcd CPU ms / trigger",
        "status PATCHes / trigger"]
    by_inventory = any(run.inventory for run in runs)
    def size(run: Result) -> int:
        return run.inventory if by_inventory else run.count

    tag = "inv" if by_inventory else "N"
    head = "".join(f"{f'{tag} = {size(run)}':>12}" for run in runs)
    what = (f"{runs[0].count} services created at once beside an inventory already up (each size in a namespace of "
            "its own)" if by_inventory else "services only, each size in a namespace of its own")
    lines = ["", f"a transfer's cost as the inventory grows ({what})",
             f"{'':34}{head}{f'{size(runs[-1])}/{size(runs[0])}':>12}"]
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("all up, s", lambda r: f"{r.seconds:.1f}" if r.seconds else (r.error or "failed")),
        ("triggers (not auto)", lambda r: str(r.triggers)),
        ("refused creates", lambda r: str(r.refused)),
        ("load at the end (1 min)", lambda r: r.load.split(" ")[0])]
    for label, value in rows:
        lines.append(f"{label:34}{''.join(f'{value(r):>12}' for r in runs)}")
    verdicts = []
    for name in names:
        row = [f.get(name) for f in figures]
        ratio = row[-1] / row[0] if row[0] and row[-1] is not None else None
        cells = "".join(f"{v:>12.2f}" if v is not None else f"{'-':>12}" for v in row)
        lines.append(f"{name:34}{cells}{f'{ratio:.2f}' if ratio is not None else '-':>12}")
        if ratio is not None and name != "etcd CPU ms / trigger":
            verdicts.append((name, ratio))
    if len(runs) > 1:
        if len(verdicts) < 2:
            lines.append("flat: - (a size did not finish: MISSED)")
        else:
            worst = max(verdicts, key=lambda v: v[1])
            verdict = "met" if worst[1] <= TARGET_FLAT else "MISSED"
            lines.append(f"flat (every figure per trigger, etcd aside, at most x{TARGET_FLAT} from {size(runs[0])} "
                         f"to {size(runs[-1])}): worst {worst[0]} x{worst[1]:.2f}: {verdict}")
    return "\n".join(lines)


def _per(r: Result) -> str:
    return f"{r.seconds * 1000 / r.count:.0f}" if r.seconds else "-"


def comparison(before: Sequence[Result], after: Sequence[Result], tree: Path) -> str:
    """This tree's figures per trigger over the baseline tree's, size by size (one run, one plane)."""
    lines = ["", f"this tree / the baseline tree ({tree}), per trigger"]
    for old, new in zip(before, after, strict=True):
        old_f, new_f = old.per_trigger(), new.per_trigger()
        cells = [f"{name} {new_f[name] / old_f[name]:.2f}" for name in new_f if old_f.get(name)]
        size = f"N = {new.count}" + (f", inventory {new.inventory}" if new.inventory else "")
        lines.append(f"  {size}: " + ("; ".join(cells) if cells else "- (a side did not finish)"))
    return "\n".join(lines)


async def baseline(args: argparse.Namespace, target: Target, workdir: Path) -> list[Result]:
    """The services at each size with the operator of `--baseline-tree` (its code first on the path)."""
    base = argparse.Namespace(**{**vars(args), "stead_pythonpath": str(args.baseline_tree)})
    async with operator_session(base, target, workdir, f"{PREFIX}-base", concurrency=max(8, args.concurrency)
                                ) as session:
        pids = {**target.pids, **({"operator": session.operator.pid} if session.operator.pid else {})}
        run = Bench(base, target, session.access, session.kube, pids, prefix=f"{PREFIX}-base")
        log(f"baseline operator pid {session.operator.pid} from {args.baseline_tree}; load {load()}")
        if args.inventory:
            return [await run.services(args.counts[0], size) for size in args.inventory]
        return [await run.services(count) for count in args.counts]


async def bench(args: argparse.Namespace, target: Target, workdir: Path) -> tuple[Result, list[Result]] | None:
    async with operator_session(args, target, workdir, PREFIX, concurrency=max(8, args.concurrency)) as session:
        operator, kube = session.operator, session.kube
        pids = {**target.pids, **({"operator": operator.pid} if operator.pid else {})}
        run = Bench(args, target, session.access, kube, pids)
        log(f"operator pid {operator.pid}; sizes {', '.join(map(str, args.counts))}; load {load()}")
        apps = await run.apps(args.counts[0])
        services = []
        if args.inventory:
            for size in args.inventory:  # the same burst beside a growing inventory
                services.append(await run.services(args.counts[0], size))
        else:
            for count in args.counts:  # each size's inventory stays: the next size's creates meet it too
                services.append(await run.services(count))
        failed = [r for r in (apps, *services) if r.error]
        if failed:
            log(f"operator log tail:\n{operator.log_tail()}")
        # the namespaces are not deleted: each deletion would run every instance's delete path; the plane goes
        return apps, services


def parse_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--count: integers separated by commas, not {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"--count: positive integers, not {text!r}")
    return counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", dest="counts", type=parse_counts, default=[200],
                        help="ServiceInstances (default 200); several sizes separated by commas (200,2000) compare a "
                             "transfer's cost per trigger as the inventory grows; the Apps run at the smallest")
    parser.add_argument("--inventory", type=parse_counts, default=None,
                        help="sizes separated by commas (200,2000): at each, first that many instances of an entity "
                             "without realization, all up (untimed), then the --count services timed beside them")
    parser.add_argument("--concurrency", type=int, default=32, help="creates in flight (default 32)")
    parser.add_argument("--script", default="sleep 0.2; echo ok", help="the create task's script")
    parser.add_argument("--warmup", type=int, default=2, help="Apps created (untimed) first")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds after all are up before the audit log is read (default 2)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds per scenario (default 3 s per object, at least 600)")
    parser.add_argument("--baseline-tree", type=Path,
                        help="first, the services at each size with the operator of this checkout (its code first on "
                             "the path: `git archive COMMIT operators pipelines | tar -x -C DIR`), on the same plane; "
                             "then this tree's, and the ratios")
    parser.add_argument("--workdir", type=Path, help="keep the operator's log and the control plane's home here")
    parser.add_argument("--stead-command", default=str(BIN / "stead"))
    parser.add_argument("--stead-pythonpath")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.add_argument("--cleanup-timeout", type=float, default=300.0)
    parser.set_defaults(stead_webhook="local")
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error("--concurrency must be positive")
    args.count = args.counts[0]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="stead-svc-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = None
    before: list[Result] = []
    try:
        with local_plane(workdir) as (target, _):
            if args.baseline_tree:
                before = asyncio.run(baseline(args, target, workdir / "baseline"))
            results = asyncio.run(bench(args, target, workdir))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if results is None:
        return 1
    apps, services = results
    print(report(apps, services[0], args))
    print(scaling_report(services))
    if before:
        print(f"\nthe baseline tree's operator ({args.baseline_tree}), before this tree's, on the same plane:")
        print(scaling_report(before))
        print(comparison(before, services, args.baseline_tree))
    return 0 if apps.seconds is not None and all(r.seconds is not None for r in services) else 1


if __name__ == "__main__":
    sys.exit(main())
