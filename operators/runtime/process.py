"""The operator process: builds the engine (store, API client, vault, reconcilers), starts the
watches that feed the reconcilers, the health endpoints, the addons and Kopf (admission webhooks
and the process's lifecycle), and stops everything it started, in reverse."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from operators.runtime.core.kinds import Kind
from operators.runtime.core.ring import Ownership, StaticMembership
from operators.runtime.core.store import LocalStore
from operators.runtime.engine.addons import Addon
from operators.runtime.engine.events import EventRecorder
from operators.runtime.engine.outage import ApiHealth
from operators.runtime.engine.reconciler import Reconciler
from operators.runtime.engine.runs import INTERRUPTED, RunSettings, discover_service_cidrs, stop_runs
from operators.runtime.engine.services import Services
from operators.runtime.engine.slots import RunSlots, default_limit
from operators.runtime.kopfwiring import WebhookOptions, prepare_kopf
from operators.runtime.kube.client import USER_AGENT, KubeClient, custom_path, load_access
from operators.runtime.kube.crds import apply_shipped, install_cluster_objects, install_crds
from operators.runtime.kube.watch import EVERYTHING, Deliver, Watch
from operators.runtime.secrets import open_vault
from operators.runtime.serving.eventloop import freeze_startup_objects
from operators.runtime.serving.metrics import HealthServer, Metrics
from operators.runtime.settings import LAST_RESORT_REPLICA, OPERATOR_NAMESPACE, ClusterSettings, HealthSettings
from operators.runtime.shard import DEFAULT_DURATION, Sharding
from operators.runtime.shard.policy import install_shard_label_policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorOptions:
    store_path: Path
    replica: str = LAST_RESORT_REPLICA
    namespace: str = OPERATOR_NAMESPACE  # the operator's own: its vault key and ciphertext Secrets live here
    kubeconfig: Path | None = None
    namespaces: Sequence[str] = ()
    install_crds: bool = False
    shipped_objects: bool = True
    """Install or update the objects Stead ships (the built-in ClusterLifecycles) once the webhook serves."""
    webhook: WebhookOptions | None = None
    health_listen: str = HealthSettings.listen
    health_port: int = HealthSettings.port
    runs: RunSettings | None = None
    """How workflow runs are started (`Services.runs`); default: state beside the store, defaults."""
    sharding: str = ClusterSettings.sharding
    """off: this replica owns every project (one replica). leases: project claims (`operators.runtime.shard`)."""
    lease_seconds: int = DEFAULT_DURATION
    """With sharding: the membership Lease's duration (adoption after a crash takes about this long)."""
    placement: str = ClusterSettings.placement
    """With sharding: ring, or bounded (consistent hashing with bounded loads over the buckets)."""
    placement_epsilon: float = ClusterSettings.placement_epsilon
    stop_runs_on_interrupt: bool = False
    """SIGINT (Ctrl-C on a terminal) stops the runs' runners and scripts too (`stop_runs`), which the
    next start resumes; SIGTERM always leaves them running, for the next operator to follow."""


async def run_operator(
    kinds: Sequence[Kind], options: OperatorOptions, stop: asyncio.Event | None = None, addons: Sequence[Addon] = ()
) -> None:
    """Run until `stop` is set (or the process is signalled); cleans up what it started, in reverse."""
    async with contextlib.AsyncExitStack() as stack:
        metrics = Metrics()
        store = LocalStore(options.store_path)
        stack.callback(store.close)
        access = load_access(options.kubeconfig)
        # with several replicas each has a user agent of its own: the audit log tells their writes apart
        agent = f"{USER_AGENT}/{options.replica}" if options.sharding == "leases" else USER_AGENT
        kube = await stack.enter_async_context(KubeClient(access, user_agent=agent))
        # Admission webhooks (and the vault writes they make) answer within the API server's
        # webhook timeout whatever the reconcilers are doing: connections of their own, so a burst
        # of reconciles holding every pooled connection cannot make a create time out.
        admission_kube = await stack.enter_async_context(
            KubeClient(access, concurrency=ADMISSION_CONNECTIONS, timeout=ADMISSION_TIMEOUT_SECONDS, user_agent=agent))
        # Watches hold their connection for minutes: a pool of their own (no limit), never the writes'.
        watch_kube = await stack.enter_async_context(KubeClient(access, concurrency=0, user_agent=agent))
        sharding = Sharding(kube, options.namespace, options.replica, duration=options.lease_seconds,
                            metrics=metrics, placement=options.placement, epsilon=options.placement_epsilon,
                            watch_kube=watch_kube) if options.sharding == "leases" else None
        writes = sharding.fenced(kube) if sharding is not None else kube  # the engine's writes: checked
        if sharding is not None:
            member = sharding.member
            metrics.gauge("stead_shard_unowned_projects", "Projects without a valid owner for longer than the "
                          "lease, as of this replica's last pass.", lambda: len(member.unowned))
            metrics.gauge("stead_shard_projects_owned", "Projects this replica acts on now.",
                          lambda: len(member.owned()))
        if options.install_crds:
            await install_crds(kube, kinds)
            await install_shard_label_policy(kube)  # the API server's own check of the sharding labels
            await install_cluster_objects(kube, kinds)  # the kinds' own policies and roles
        recorder = EventRecorder(writes, metrics, options.replica)
        vault = await open_vault(admission_kube, store, options.namespace)
        runs = options.runs or RunSettings.beside(options.store_path)
        if not runs.service_cidrs:
            runs = replace(runs, service_cidrs=await discover_service_cidrs(kube))
        slots = RunSlots(runs.max_concurrent or default_limit())
        metrics.gauge("stead_runs_running", "Workflow runs in progress in this operator.", lambda: slots.running)
        metrics.gauge("stead_runs_queued", "Workflow runs waiting for a slot (see --max-concurrent-runs).",
                      lambda: slots.queued)
        unfiltered: dict[str, Watch] = {}  # filled below, once the watches exist
        bucketed: dict[str, Watch] = {}  # likewise
        ownership = sharding or Ownership(options.replica, StaticMembership([options.replica]))
        services = Services(kube=writes, store=store, events=recorder, replica=options.replica, vault=vault,
                            runs=runs, metrics=metrics, run_slots=slots, owns=ownership.owns, watches=unfiltered,
                            owned_watches=bucketed)
        api_health = ApiHealth(lambda: kube.request("GET", "/version"))
        stack.push_async_callback(api_health.close)
        reconcilers = [
            Reconciler(kind, store=store, ownership=ownership, writer=writes, events=recorder, metrics=metrics,
                       services=services, health=api_health, guard=sharding.guard if sharding is not None else None)
            for kind in kinds
        ]
        if sharding is not None:
            sharding.works.extend(reconcilers)
        _link_dependents(reconcilers)
        for reconciler in reconcilers:
            stack.push_async_callback(reconciler.close)
            swept = reconciler.sweep(await kube.list(reconciler.kind.plural))  # deleted while we were away
            if swept:
                log.info("dropped %d stale %s store entries", swept, reconciler.kind.kind)
        watches, followed = _watches(watch_kube, reconcilers, options.namespaces, sharding, metrics)
        if sharding is None and not options.namespaces:
            unfiltered.update({r.kind.plural: w for r in reconcilers for w in watches if w.kind == r.kind.kind})
        elif sharding is not None and not options.namespaces:
            bucketed.update({r.kind.plural: w for r in reconcilers for w in followed if w.kind == r.kind.kind})
        start_kopf = await prepare_kopf(kube, kinds, replace(services, kube=admission_kube),
                                        options.kubeconfig, options.webhook, stack, label_buckets=sharding is not None)
        health = HealthServer(metrics, options.health_listen, options.health_port)
        await health.start()
        stack.push_async_callback(health.stop)
        for addon in addons:
            await addon.start(services)
            stack.push_async_callback(addon.stop)
        # after the addons: those that tap a watch see its first listing
        watching = [asyncio.create_task(watch.run()) for watch in watches]
        stack.callback(lambda: [task.cancel() for task in watching])

        async def quiesce() -> None:
            """Stop the watches and what the reconcilers have pending, and wait for it."""
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)
            for reconciler in reconcilers:
                await reconciler.close()
        _background(stack, recorder.run())
        stack.push_async_callback(recorder.drain)  # runs before the poster is cancelled
        ready = asyncio.Event()
        _background(stack, _become_ready(ready, health, options.webhook, watches))
        if options.shipped_objects:  # after the webhook serves: the shipped objects are admitted like any other
            _background(stack, apply_shipped(kube, kinds))
        kopf_stop = asyncio.Event()

        async def interrupted() -> None:
            """Ctrl-C: the runs stop with the operator (`OperatorOptions.stop_runs_on_interrupt`)."""
            if options.stop_runs_on_interrupt:
                stopped = await asyncio.to_thread(stop_runs, runs.state_dir, INTERRUPTED)
                if stopped:
                    log.info("stopped %d runs (the next start resumes them): %s", len(stopped), ", ".join(stopped))
        _background(stack, _run_until_stopped(ready, stop, kopf_stop, sharding, quiesce, interrupted))
        freeze_startup_objects()
        await start_kopf(options.namespaces, kopf_stop, ready)


ADMISSION_CONNECTIONS = 16
ADMISSION_TIMEOUT_SECONDS = 5.0
"""Half the webhooks' `timeoutSeconds` (10): a slow call fails the request with a clear error
rather than the API server's "context deadline exceeded"."""


def _watches(kube: KubeClient, reconcilers: Sequence[Reconciler], namespaces: Sequence[str],
             sharding: Sharding | None, metrics: Metrics) -> tuple[list[Watch], list[Watch]]:
    """One watch per kind and scope (each namespace given, or all), feeding the kind's reconciler, and
    those of them that follow this replica's buckets. With sharding, those of namespaced kinds select the
    buckets of this replica's projects (`Sharding.follow`), and objects without a bucket label are watched
    to be labelled."""
    scopes: list[str | None] = list(namespaces) or [None]
    watches: list[Watch] = []
    followed: list[Watch] = []
    for reconciler in reconcilers:
        kind = reconciler.kind
        for scope in [None] if kind.cluster_scoped else scopes:
            deliver: Deliver = reconciler.on_event
            if sharding is not None and not kind.cluster_scoped:
                deliver = sharding.feed(deliver, kind.plural)
            watch = Watch(kube, custom_path(kind.plural, scope), kind.kind, deliver, selection=EVERYTHING,
                          metrics=metrics)
            watches.append(watch)
            if sharding is not None and not kind.cluster_scoped:
                followed.append(watch)
    if sharding is not None:
        sharding.follow(followed)
        watches += sharding.labellers(kube, [r.kind for r in reconcilers], scopes)
    return watches, followed


_TOLD: contextvars.ContextVar[frozenset[tuple[str, str, str]]] = contextvars.ContextVar("_TOLD", default=frozenset())
"""The objects told of a change along the current chain of rechecks (`_link_dependents`)."""


def _link_dependents(reconcilers: Sequence[Reconciler]) -> None:
    """When an object becomes Ready, stops being Ready or goes, the objects of other kinds that
    refer to it (`Kind.depends_on`) are checked again."""
    dependents = [r for r in reconcilers if r.kind.depends_on]
    if not dependents:
        return

    async def notify(kind: str, namespace: str, name: str) -> None:
        # a recheck tells the rechecked objects' referrers in turn; along one chain each object is told once,
        # so that objects of a kind that refers to its own kind (relations) never loop
        told = _TOLD.get()
        if (kind, namespace, name) in told:
            return
        token = _TOLD.set(told | {(kind, namespace, name)})
        try:
            for dependent in dependents:
                await dependent.recheck_referrers(kind, namespace, name)
        finally:
            _TOLD.reset(token)

    for reconciler in reconcilers:
        if any(reconciler.kind.kind in d.kind.depends_on for d in dependents):
            reconciler.on_ready_change = notify


async def _run_until_stopped(ready: asyncio.Event, stop: asyncio.Event | None, kopf_stop: asyncio.Event,
                             sharding: Sharding | None, quiesce: Callable[[], Awaitable[None]],
                             interrupted: Callable[[], Awaitable[None]] | None = None) -> None:
    """Once ready, SIGTERM, SIGINT or `stop` ends the operator in order: with sharding, every project
    handed over first (drained, claims and membership released); then the watches and the reconcilers'
    pending work are stopped here (after SIGINT, `interrupted` then), and only then Kopf. (Kopf,
    stopping, waits up to 5 s for every task created after it started before it cancels them: ours
    would be among them.)"""
    leaving = asyncio.Event()
    signals: list[int] = []

    def on_signal(signum: int) -> None:
        signals.append(signum)
        leaving.set()

    forward = asyncio.create_task(_set_when(stop, leaving)) if stop is not None else None
    waits = [asyncio.create_task(ready.wait()), asyncio.create_task(leaving.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()
    if not leaving.is_set():
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):  # in place of Kopf's own, installed before `ready`
            loop.add_signal_handler(signum, on_signal, signum)
    try:
        if sharding is not None and not leaving.is_set():
            await sharding.member.run(leaving)
            log.info("%s handed its projects over", sharding.replica)
        else:
            await leaving.wait()
    finally:
        if forward is not None:
            forward.cancel()
        await quiesce()
        if interrupted is not None and signal.SIGINT in signals:
            await interrupted()
        kopf_stop.set()


async def _set_when(flag: asyncio.Event, then: asyncio.Event) -> None:
    await flag.wait()
    then.set()


def _background(stack: contextlib.AsyncExitStack, coroutine: Coroutine[Any, Any, None]) -> None:
    """A task that lives as long as the operator and is cancelled when it stops."""
    task = asyncio.create_task(coroutine)
    stack.callback(task.cancel)


async def _become_ready(ready: asyncio.Event, health: HealthServer, webhook: WebhookOptions | None,
                        watches: Sequence[Watch]) -> None:
    """Ready once Kopf has started, every watch has listed what it selects (with sharding: nothing
    before the first pass) and, with webhooks, once their port accepts connections."""
    await ready.wait()
    for watch in watches:
        await watch.listed.wait()
    while webhook is not None:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection(webhook.listen, webhook.port)
            writer.close()
            break
        await asyncio.sleep(0.1)
    health.ready = True
    log.info("stead operator ready")


__all__ = ["OperatorOptions", "WebhookOptions", "run_operator"]
