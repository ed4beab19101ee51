"""The operator's part of the runs Stead creates by itself (`operators.graphs.autorun` says what and when).

An addon of the operator process: it follows the Environments, ConfigComponents and ConfigValues through
the configuration cache (`operators.config.cache`), which taps the operator's own watches (with sharding,
those of this replica's buckets: it receives no other replica's objects), and looks at an environment again
when something of its namespace changed, or while changes wait. Only the replica that holds the
environment's project acts (`Services.owns`): the others neither compare nor create anything.

The values compared with are kept per environment in the store (`auto-run` database): the nodes and their
effective values of the resources the graph's `refreshOn` names, as of the last run created (or when the
environment opted in). They move forward when a run is created, or when a change calls for none. A replica
that takes the project over starts from what it sees then (a change made during the hand-over makes no run).
A baseline and the driver's state are the Environment's own (its `metadata.uid`): an Environment deleted
and created again under the same name (a namespace re-created may be another tenant's) starts afresh, with
`AutoRunArmed` again, even when this replica never saw the deletion (it was down meanwhile).

Visible: a `GraphRun` labelled `stead.dev/created-by: stead-auto-run`, its `spec.trigger` saying why; Events
on the Environment: `AutoRunArmed` (values recorded: changes from now on count), `AutoRunCreated` (naming
the run and the reason), `AutoRunQueued` (a run is in progress: one follow-up when it ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from operators.config.cache import PLURALS, CachedConfigRepository, cached_repository
from operators.config.repository import ENVIRONMENTS
from operators.environment.models import AutoRun, EnvironmentSpec
from operators.graphs.autorun import (
    Pending,
    Trigger,
    config_trigger,
    decide,
    node_added_trigger,
    note,
    resources_read,
    run_object,
)
from operators.graphs.kept import MergedGraphStore
from operators.graphs.models import GRAPH_RUN, Task
from operators.graphs.run import others_running, values_by_node
from operators.runtime import ApiError, LocalStore, Objects, Observed, ProcessServices, Watch, load_access, project_key

log = logging.getLogger(__name__)

AUTO_RUN_DB = b"auto-run"
TICK_SECONDS = 0.5
"""How often environments with changes waiting are looked at (a poll interval: debounce windows are
seconds long)."""


@dataclass(frozen=True)
class Baseline:
    """What changes are measured against: the nodes, and their values (node -> resource -> values)."""

    nodes: tuple[str, ...]
    values: Mapping[str, Mapping[str, Any]]
    uid: str = ""
    """The Environment's `metadata.uid` the baseline was taken of ("" in one kept before uids: nobody's)."""


class BaselineStore:
    """The baselines in the operator's LMDB store, keyed `<namespace>/<environment>`, each naming the
    Environment (uid) it is of."""

    def __init__(self, store: LocalStore) -> None:
        self._env, self._db = store.open_db(AUTO_RUN_DB)

    def get(self, key: str) -> Baseline | None:
        with self._env.begin(db=self._db) as txn:
            raw = txn.get(key.encode())
        if raw is None:
            return None
        data = json.loads(raw)
        return Baseline(tuple(data.get("nodes") or ()), data.get("values") or {}, str(data.get("uid") or ""))

    def put(self, key: str, baseline: Baseline) -> None:
        text = json.dumps({"nodes": list(baseline.nodes), "values": baseline.values, "uid": baseline.uid},
                          separators=(",", ":"))
        with self._env.begin(db=self._db, write=True) as txn:
            txn.put(key.encode(), text.encode())

    def delete(self, key: str) -> None:
        with self._env.begin(db=self._db, write=True) as txn:
            txn.delete(key.encode())


@dataclass
class _State:
    uid: str = ""  # the Environment's metadata.uid: another one under the same name starts afresh
    stamp: tuple[int, str] = (-1, "")
    pending: Pending | None = None
    queued: bool = False
    seen: tuple[tuple[str, ...], Mapping[str, Any]] | None = None  # the nodes and values last looked at
    watching: str = ""  # what the last AutoRunArmed Event said


class AutoRunner:
    """The addon (see the module's docstring)."""

    name = "graph-auto-run"

    def __init__(self, tick: float = TICK_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.tick = tick
        self.clock = clock
        self._states: dict[str, _State] = {}
        self._off: set[str] = set()  # environments seen not opted in (or not ours): no baseline kept
        self._stack = contextlib.AsyncExitStack()
        self._task: asyncio.Task[None] | None = None

    async def start(self, services: ProcessServices) -> None:
        repository = await self._stack.enter_async_context(
            cached_repository(services.kube, load_access(None), _followed(services)))
        assert isinstance(repository, CachedConfigRepository)
        self._task = asyncio.create_task(self._loop(services, repository))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._stack.aclose()

    async def _loop(self, services: ProcessServices, repository: CachedConfigRepository) -> None:
        baselines = BaselineStore(services.store)
        while True:
            await asyncio.sleep(self.tick)  # the poll interval (see TICK_SECONDS), not a synchronisation
            if not repository.cache.ready:
                continue
            for namespace, name, cached in repository.cache.everywhere(ENVIRONMENTS):
                try:
                    await self.look(services, repository, baselines, namespace, name, cached.body, cached.spec)
                except Exception:  # one environment's trouble must not stop the others'
                    log.exception("auto-run of environment %s/%s", namespace, name)

    async def look(self, services: ProcessServices, repository: CachedConfigRepository, baselines: BaselineStore,
                   namespace: str, name: str, body: Mapping[str, Any], spec: EnvironmentSpec | None) -> None:
        """Look at one environment: record its values, note a change, create the run when it is due."""
        key = f"{namespace}/{name}"
        labels = dict((body.get("metadata") or {}).get("labels") or {})
        auto = spec.graphs.auto_run if spec is not None and spec.graphs is not None else None
        if spec is None or auto is None or not (auto.on_config_change or auto.on_node_added) \
                or not services.owns(project_key(labels, namespace)):
            if key not in self._off:  # opted out (or not ours): opting in again starts afresh
                self._states.pop(key, None)
                baselines.delete(key)
                self._off.add(key)
            return
        self._off.discard(key)
        uid = str((body.get("metadata") or {}).get("uid") or "")
        state = self._states.get(key)
        if state is None or state.uid != uid:  # first sight, or another Environment of the same name
            state = self._states[key] = _State(uid)
        merge = MergedGraphStore(services.store).get(namespace, name, auto.graph_type)
        # what may have changed: anything of the namespace's configuration, or the merged graph (its refreshOn)
        stamp = (repository.cache.stamp(namespace), merge.digest if merge is not None else "")
        if stamp == state.stamp and state.pending is None:
            return
        tasks = merge.task_models() if merge is not None and merge.problem is None else []
        snapshot = await repository.snapshot(namespace, name)
        values = values_by_node(spec, snapshot, resources_read(tasks))
        nodes = tuple(n.name for n in spec.nodes)
        baseline = baselines.get(key)
        if baseline is not None and baseline.uid != uid:  # an Environment's before this one: not its base
            baseline = None
        environment = Observed.from_body({**body, "kind": "Environment"})
        watching = _armed(auto, tasks)
        if watching != state.watching:  # opted in, or the graph names other keys now: say what counts
            state.watching = watching
            services.events.record(environment, "Normal", "AutoRunArmed", watching)
        if baseline is None:
            baselines.put(key, Baseline(nodes, values, uid))
            state.stamp = stamp
            return
        triggers = _triggers(auto, tasks, baseline, nodes, values)
        state.stamp = stamp
        if triggers and (nodes, values) != state.seen:  # a change that counts: the window starts again
            state.pending = note(state.pending, self.clock())
        state.seen = (nodes, values)
        if not triggers:
            baselines.put(key, Baseline(nodes, values, uid))  # nothing to run: what is in force now is the base
            state.pending, state.queued = None, False
            return
        assert state.pending is not None
        if decide(state.pending, self.clock(), auto.debounce_seconds, busy=False) == "wait":
            return
        busy = await others_running(services.kube, namespace, name, "")
        if busy:
            if not state.queued:
                state.queued = True
                services.events.record(environment, "Normal", "AutoRunQueued", f"GraphRun {busy[0]} is in "
                                       f"progress: one run follows it ({triggers[0].reason})"[:1024])
            return
        trigger = triggers[0]
        body_ = run_object(namespace, name, labels, trigger, auto.graph_type, auto.dry_run)
        try:
            created = await Objects(services.kube).create(GRAPH_RUN, namespace, body_)
        except ApiError as error:  # a run created meanwhile (409), an outage: tried again at the next tick
            log.info("auto-run of environment %s: GraphRun not created: %s", key, error)
            return
        run = str((created.get("metadata") or {}).get("name") or "")
        if trigger.event == "deploy_changes":  # the new nodes' values become the base; other changes wait
            kept = {n: v for n, v in baseline.values.items() if n in baseline.nodes}
            baselines.put(key, Baseline(nodes, {**{n: v for n, v in values.items() if n not in kept}, **kept}, uid))
        else:
            baselines.put(key, Baseline(nodes, values, uid))
        state.pending = note(None, self.clock()) if len(triggers) > 1 else None
        state.queued = False
        log.info("auto-run of environment %s: GraphRun %s created: %s", key, run, trigger.reason)
        services.events.record(environment, "Normal", "AutoRunCreated", f"GraphRun {run}: {trigger.reason}")


def _followed(services: ProcessServices) -> dict[str, Watch] | None:
    """The operator's watches the cache taps: those that see everything (one replica), else those of this
    replica's buckets (sharding: it acts on its own projects only, and receives no other's); None (watches of
    its own, of every namespace) when neither covers the three kinds (`--namespace`)."""
    for watches in (services.watches, services.owned_watches):
        if set(PLURALS) <= set(watches):
            return {plural: watches[plural] for plural in PLURALS}
    return None


def _triggers(auto: AutoRun, tasks: list[Task], baseline: Baseline, nodes: tuple[str, ...],
              values: Mapping[str, Mapping[str, Any]]) -> list[Trigger]:
    """What the change from the baseline calls for, nodes added first (then the values, in a follow-up)."""
    found = []
    if auto.on_node_added and (added := node_added_trigger(tasks, baseline.nodes, nodes)) is not None:
        found.append(added)
    if auto.on_config_change and (changed := config_trigger(tasks, baseline.values, values)) is not None:
        found.append(changed)
    return found


def _armed(auto: AutoRun, tasks: list[Task]) -> str:
    watched = sorted({ref for t in tasks for ref in t.refresh_on})
    what = []
    if auto.on_config_change:
        what.append(f"changes of {', '.join(watched) if watched else 'nothing (no refreshOn in the graph)'}")
    if auto.on_node_added:
        what.append("nodes added")
    return (f"values recorded: {' and '.join(what)} make a GraphRun of type {auto.graph_type!r} "
            f"after {auto.debounce_seconds}s of quiet")
