"""The reconciler between events and the engine: writes, skips, retries, ownership, the store."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators.environment import KIND
from operators.runtime.core.kinds import FINALIZER
from operators.runtime.core.pipeline import Observed, PermanentError, Pipeline, StepContext, TemporaryError
from operators.runtime.core.ring import Ownership, StaticMembership
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.engine.reconciler import Backoff, Reconciler
from operators.runtime.kube.client import ApiError
from operators.runtime.serving.metrics import Metrics


class RecordingWriter:
    """Stands in for the API server's status subresource: keeps what was written."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.finalizer_changes: list[tuple[str, str]] = []
        self.fail_with: Exception | None = None

    async def add_finalizer(self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...],
                            finalizer: str) -> dict[str, Any]:
        self.finalizer_changes.append(("add", name))
        return {}

    async def remove_finalizer(self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...],
                               finalizer: str) -> dict[str, Any]:
        self.finalizer_changes.append(("remove", name))
        return {}

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        if self.fail_with is not None:
            raise self.fail_with
        self.patches.append((name, status))
        return {}


class RecordingEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        self.events.append((obj.name, type_, reason))


def body(name: str = "e1", generation: int = 1, spec: Mapping[str, Any] | None = None,
         status: Mapping[str, Any] | None = None, uid: str = "u1", namespace: str = "ns") -> dict[str, Any]:
    return {
        "kind": "Environment",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation},
        "spec": dict(spec or {"release": "r1", "nodes": [{"name": "n1", "roles": ["controller"]}]}),
        "status": dict(status or {}),
    }


FAST = Backoff(base=0.01, cap=0.05)


def make(
    tmp_path: Path, kind: Any = KIND, owner: str = "stead-0", backoff: Backoff = FAST
) -> tuple[Reconciler, RecordingWriter, RecordingEvents, LocalStore]:
    store = LocalStore(tmp_path / "store")
    writer, events = RecordingWriter(), RecordingEvents()
    rec = Reconciler(kind, store=store, ownership=Ownership(owner, StaticMembership(["stead-0"])),
                     writer=writer, events=events, metrics=Metrics(), clock=lambda: "T", backoff=backoff,
                     services=SimpleNamespace(store=store))  # what the Environment's steps use
    return rec, writer, events, store


def test_a_new_object_gets_one_status_patch(tmp_path: Path) -> None:
    rec, writer, events, store = make(tmp_path)
    asyncio.run(rec.on_event("ADDED", body()))
    assert len(writer.patches) == 1
    status = writer.patches[0][1]
    assert status["phase"] == "Provisioned" and status["nodeCount"] == 1 and status["roles"] == {"controller": 1}
    assert events.events == [("e1", "Normal", "Provisioned")]
    assert store.get(object_key("Environment", "ns", "e1")) is not None


def test_our_own_status_write_echoed_back_costs_nothing(tmp_path: Path) -> None:
    rec, writer, _, _ = make(tmp_path)
    asyncio.run(rec.on_event("ADDED", body()))
    written = writer.patches[0][1]
    asyncio.run(rec.on_event("MODIFIED", body(status=written)))
    asyncio.run(rec.on_event(None, body(status=written)))  # a restart's initial listing
    assert len(writer.patches) == 1


def test_invalid_spec_stalls_once_and_waits(tmp_path: Path) -> None:
    rec, writer, events, store = make(tmp_path)
    bad = {"release": "r", "nodes": [{"name": "a", "roles": ["x"]}, {"name": "b", "roles": []}]}
    asyncio.run(rec.on_event("ADDED", body(spec=bad)))
    status = writer.patches[0][1]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert stalled["message"].startswith("spec.nodes[1].roles: ")
    asyncio.run(rec.on_event("MODIFIED", body(spec=bad, status=status)))
    assert len(writer.patches) == 1  # no retry loop on bad input
    assert events.events == [("e1", "Warning", "InvalidSpec")]
    assert store.count("Environment") == 0


def test_objects_of_other_replicas_are_not_touched(tmp_path: Path) -> None:
    rec, writer, events, _ = make(tmp_path, owner="stead-1")
    asyncio.run(rec.on_event("ADDED", body()))
    assert writer.patches == [] and events.events == []


def test_delete_removes_the_store_entry(tmp_path: Path) -> None:
    rec, _, _, store = make(tmp_path)
    asyncio.run(rec.on_event("ADDED", body()))
    asyncio.run(rec.on_event("DELETED", body()))
    assert store.count("Environment") == 0


def test_sweep_forgets_objects_deleted_while_away(tmp_path: Path) -> None:
    rec, _, _, store = make(tmp_path)
    asyncio.run(rec.on_event("ADDED", body("a", uid="ua")))
    asyncio.run(rec.on_event("ADDED", body("b", uid="ub")))
    removed = rec.sweep([{"metadata": {"namespace": "ns", "name": "a", "uid": "ua"}}])
    assert removed == 1 and [k for k, _ in store.items("Environment")] == ["Environment/ns/a"]


def test_temporary_errors_retry_with_backoff_until_success(tmp_path: Path) -> None:
    calls: list[int] = []

    async def flaky(ctx: StepContext) -> Mapping[str, Any]:
        calls.append(1)
        if len(calls) < 3:
            raise TemporaryError("NotYet", "dependency not ready")
        return {"done": True}

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": flaky}))
    rec, writer, events, _ = make(tmp_path, kind=kind)

    async def scenario() -> None:
        await rec.on_event("ADDED", body())
        for _ in range(200):
            if writer.patches and writer.patches[-1][1].get("phase") == "Provisioned":
                return
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert len(calls) == 3
    # one write for Reconciling (the second failure is identical: no write), one for Provisioned
    assert [p[1].get("phase") for p in writer.patches] == ["Init", "Provisioned"]
    assert [e[2] for e in events.events] == ["NotYet", "Provisioned"]


def test_a_failed_status_write_is_retried(tmp_path: Path) -> None:
    rec, writer, _, _ = make(tmp_path)
    writer.fail_with = ApiError(500, "etcd timeout")

    async def scenario() -> None:
        await rec.on_event("ADDED", body())
        writer.fail_with = None
        for _ in range(200):
            if writer.patches:
                return
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert writer.patches and writer.patches[0][1]["phase"] == "Provisioned"


@pytest.mark.parametrize("attempt,expected", [(1, 1.0), (2, 2.0), (5, 16.0), (20, 300.0)])
def test_backoff_doubles_up_to_its_cap(attempt: int, expected: float) -> None:
    assert Backoff().delay(attempt) == expected


def _with_cleanup(cleanup: Any) -> Any:
    return dataclasses.replace(KIND, cleanup=cleanup)


def _deleting(status: Mapping[str, Any]) -> dict[str, Any]:
    b = body(status=status, generation=2)
    b["metadata"].update(deletionTimestamp="2026-11-21T10:00:00Z", finalizers=[FINALIZER])
    return b


def test_a_kind_with_a_cleanup_holds_its_finalizer(tmp_path: Path) -> None:
    async def cleanup(ctx: StepContext) -> Mapping[str, Any]:
        return {}

    rec, writer, _, _ = make(tmp_path, kind=_with_cleanup(cleanup))
    asyncio.run(rec.on_event("ADDED", body()))  # created past the webhook: no finalizer yet
    assert writer.finalizer_changes == [("add", "e1")]
    with_finalizer = body(status=writer.patches[0][1])
    with_finalizer["metadata"]["finalizers"] = [FINALIZER]
    asyncio.run(rec.on_event("MODIFIED", with_finalizer))
    assert writer.finalizer_changes == [("add", "e1")]


def test_delete_runs_the_cleanup_then_lets_the_object_go(tmp_path: Path) -> None:
    ran: list[str] = []

    async def cleanup(ctx: StepContext) -> Mapping[str, Any]:
        ran.append(ctx.obj.name)
        return {}

    rec, writer, _, store = make(tmp_path, kind=_with_cleanup(cleanup))
    ready = body()
    ready["metadata"]["finalizers"] = [FINALIZER]
    asyncio.run(rec.on_event("ADDED", ready))
    asyncio.run(rec.on_event("MODIFIED", _deleting(writer.patches[0][1])))
    assert ran == ["e1"] and writer.finalizer_changes == [("remove", "e1")]
    assert store.count("Environment") == 0


def test_a_failing_cleanup_keeps_the_object_with_the_reason(tmp_path: Path) -> None:
    async def cleanup(ctx: StepContext) -> Mapping[str, Any]:
        raise PermanentError("DeleteActionFailed", "task stop-db failed: exit 3")

    rec, writer, events, _ = make(tmp_path, kind=_with_cleanup(cleanup))
    asyncio.run(rec.on_event("MODIFIED", _deleting({})))
    status = writer.patches[-1][1]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert status["phase"] == "Deleting" and stalled["reason"] == "DeleteActionFailed"
    assert writer.finalizer_changes == []  # held: not stuck silently, not lost either
    assert ("e1", "Warning", "DeleteActionFailed") in events.events


def test_a_temporarily_failing_cleanup_is_retried(tmp_path: Path) -> None:
    calls: list[int] = []

    async def cleanup(ctx: StepContext) -> Mapping[str, Any]:
        calls.append(1)
        if len(calls) < 3:
            raise TemporaryError("NotYet", "runner busy")
        return {}

    rec, writer, _, _ = make(tmp_path, kind=_with_cleanup(cleanup))

    async def scenario() -> None:
        await rec.on_event("MODIFIED", _deleting({}))
        for _ in range(200):
            if writer.finalizer_changes:
                return
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert len(calls) == 3 and writer.finalizer_changes == [("remove", "e1")]


def test_objects_are_checked_again_when_what_they_refer_to_changes(tmp_path: Path) -> None:
    runs: list[str] = []
    env_ok = {"value": True}

    async def check_env(ctx: StepContext) -> Mapping[str, Any]:
        runs.append(ctx.obj.name)
        if not env_ok["value"]:
            raise PermanentError("EnvironmentGone", "spec.environment: not found")
        return {}

    dependent = dataclasses.replace(
        KIND, kind="ConfigValues", plural="configvalues",
        pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": check_env}),
        depends_on={"Environment": lambda spec, name: spec.get("environment") == name},
    )
    envs, _, _, store = make(tmp_path)
    values = Reconciler(dependent, store=store, ownership=Ownership("stead-0", StaticMembership(["stead-0"])),
                        writer=RecordingWriter(), events=RecordingEvents(), metrics=Metrics(), clock=lambda: "T")
    envs.on_ready_change = values.recheck_referrers

    def cv(name: str, environment: str) -> dict[str, Any]:
        b = body(name, spec={"environment": environment})
        b["kind"] = "ConfigValues"
        return b

    ready = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}

    async def scenario() -> None:
        await values.on_event("ADDED", cv("a", "e1"))
        await values.on_event("ADDED", cv("b", "other"))
        await envs.on_event(None, body("e1", status=ready))  # a restart's listing: records only
        assert runs == ["a", "b"]
        await envs.on_event("MODIFIED", body("e1", status=ready, generation=1))  # unchanged: nothing
        assert runs == ["a", "b"]
        await envs.on_event("MODIFIED", body("e1", generation=2, status={**ready, "observedGeneration": 2}))
        assert runs == ["a", "b", "a"]  # only what refers to e1
        busy = {"observedGeneration": 2, "conditions": [{"type": "Reconciling", "status": "True"}]}
        await envs.on_event("MODIFIED", body("e1", generation=3, status=busy))  # stops being Ready
        assert runs == ["a", "b", "a", "a"]
        stalled = {"observedGeneration": 3, "conditions": [{"type": "Stalled", "status": "True"}]}
        await envs.on_event("MODIFIED", body("e1", generation=3, status=stalled))  # came to rest, failed
        assert runs == ["a", "b", "a", "a", "a"]
        await envs.on_event("MODIFIED", body("e1", generation=3, status=busy))  # retrying: nothing new yet
        assert runs == ["a", "b", "a", "a", "a"]
        env_ok["value"] = False
        await envs.on_event("DELETED", body("e1"))
        assert runs == ["a", "b", "a", "a", "a", "a"]

    asyncio.run(scenario())
    assert store.get(object_key("ConfigValues", "ns", "a")) is None  # a failed recheck drops the stale record
    assert store.get(object_key("ConfigValues", "ns", "b")) is not None


def test_referrers_checked_again_for_a_deletion_no_longer_find_it_in_the_store(tmp_path: Path) -> None:
    """An Environment that reads its ConfigComponents (or its DeploymentGraphs) from the store must not
    see the one whose deletion it is being told of."""
    seen: list[bool] = []

    async def look(ctx: StepContext) -> Mapping[str, Any]:
        seen.append(ctx.services.store.get(object_key("Environment", "ns", "e1")) is not None)
        return {}

    dependent = dataclasses.replace(
        KIND, kind="ConfigValues", plural="configvalues",
        pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": look}),
        depends_on={"Environment": lambda spec, name: spec.get("environment") == name})
    envs, _, _, store = make(tmp_path)
    values = Reconciler(dependent, store=store, ownership=Ownership("stead-0", StaticMembership(["stead-0"])),
                        writer=RecordingWriter(), events=RecordingEvents(), metrics=Metrics(), clock=lambda: "T",
                        services=SimpleNamespace(store=store))
    envs.on_ready_change = values.recheck_referrers
    b = body("a", spec={"environment": "e1"})
    b["kind"] = "ConfigValues"

    async def scenario() -> None:
        await envs.on_event("ADDED", body("e1"))
        await values.on_event("ADDED", b)
        await envs.on_event("DELETED", body("e1"))

    asyncio.run(scenario())
    assert seen == [True, False]


def test_a_cluster_scoped_change_reaches_referrers_in_every_namespace_and_their_own_referrers(
        tmp_path: Path) -> None:
    """ClusterLifecycle -> ServiceEntity (any namespace) -> ServiceInstance: an edited lifecycle under an
    entity that stays Ready still reaches the entity's instances."""
    runs: list[tuple[str, str]] = []

    async def note(ctx: StepContext) -> Mapping[str, Any]:
        runs.append((ctx.obj.kind, f"{ctx.obj.namespace}/{ctx.obj.name}"))
        return {}

    def kind(name: str, refers: dict[str, Any]) -> Any:
        return dataclasses.replace(KIND, kind=name, plural=name.lower() + "s", depends_on=refers,
                                   pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": note}))

    entities_kind = kind("ServiceEntity", {"ClusterLifecycle": lambda spec, name: spec.get("lifecycle") == name})
    instances_kind = kind("ServiceInstance", {"ServiceEntity": lambda spec, name: spec.get("entity") == name})
    store = LocalStore(tmp_path / "store")

    def reconciler(k: Any) -> Reconciler:
        return Reconciler(k, store=store, ownership=Ownership("stead-0", StaticMembership(["stead-0"])),
                          writer=RecordingWriter(), events=RecordingEvents(), metrics=Metrics(), clock=lambda: "T")

    entities, instances = reconciler(entities_kind), reconciler(instances_kind)
    lifecycles = reconciler(kind("ClusterLifecycle", {}))

    async def notify(kind_name: str, namespace: str, name: str) -> None:
        for dependent in (entities, instances):
            await dependent.recheck_referrers(kind_name, namespace, name)

    lifecycles.on_ready_change = entities.on_ready_change = notify

    def of(kind_name: str, name: str, namespace: str, **spec: str) -> dict[str, Any]:
        b = body(name, spec=spec, namespace=namespace)
        b["kind"] = kind_name
        return b

    ready = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}

    async def scenario() -> None:
        await entities.on_event("ADDED", of("ServiceEntity", "e", "team-a", lifecycle="simple"))
        await entities.on_event("ADDED", of("ServiceEntity", "e", "team-b", lifecycle="simple"))
        await entities.on_event("ADDED", of("ServiceEntity", "other", "team-a", lifecycle="mine"))
        await instances.on_event("ADDED", of("ServiceInstance", "i", "team-a", entity="e"))
        await instances.on_event("ADDED", of("ServiceInstance", "j", "team-a", entity="other"))
        runs.clear()
        edited = body("simple", generation=2, status={**ready, "observedGeneration": 2}, namespace="")
        edited["kind"] = "ClusterLifecycle"
        await lifecycles.on_event("MODIFIED", edited)

    asyncio.run(scenario())
    assert sorted(r for r in runs if r[0] != "ClusterLifecycle") == [
        ("ServiceEntity", "team-a/e"), ("ServiceEntity", "team-b/e"), ("ServiceInstance", "team-a/i")]


def test_a_body_older_than_our_own_last_write_is_not_acted_on(tmp_path: Path) -> None:
    """Events queued from before our write would otherwise Restore over it (and undo later fields)."""
    rec, writer, _, _ = make(tmp_path)

    async def versioned(plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        writer.patches.append((name, status))
        return {"metadata": {"resourceVersion": "10"}}

    writer.patch_status = versioned  # type: ignore[method-assign]
    fresh = body()
    fresh["metadata"]["resourceVersion"] = "7"
    asyncio.run(rec.on_event("ADDED", fresh))
    assert len(writer.patches) == 1
    stale = body()  # an event from before the write (no status yet): Restore would write again
    stale["metadata"]["resourceVersion"] = "8"
    asyncio.run(rec.on_event("MODIFIED", stale))
    assert len(writer.patches) == 1
    echo = body(status=writer.patches[0][1])
    echo["metadata"]["resourceVersion"] = "10"
    asyncio.run(rec.on_event("MODIFIED", echo))
    assert len(writer.patches) == 1


def test_events_arriving_during_a_reconcile_coalesce_into_one_with_the_freshest_body(tmp_path: Path) -> None:
    seen: list[str] = []
    gate = asyncio.Event()

    async def slow(ctx: StepContext) -> Mapping[str, Any]:
        seen.append(ctx.obj.spec["release"])
        if len(seen) == 1:
            await gate.wait()
        return {}

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": slow}))
    rec, _, _, _ = make(tmp_path, kind=kind)
    key = object_key("Environment", "ns", "e1")

    async def scenario() -> None:
        first = asyncio.create_task(rec.reconcile(key, Observed.from_body(body(spec={"release": "r1"}))))
        await asyncio.sleep(0)  # let the first take the lock
        bodies = [Observed.from_body(body(generation=g, spec={"release": f"r{g}"})) for g in (2, 3, 4)]
        later = [asyncio.create_task(rec.reconcile(key, b)) for b in bodies]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *later)

    asyncio.run(scenario())
    assert seen == ["r1", "r4"]


def test_an_object_deleted_while_its_reconcile_runs_leaves_every_queue(tmp_path: Path) -> None:
    """Its DELETED event arrives mid-step; the step then fails temporarily: no retry is scheduled
    (before, the retry re-armed itself with the stale body every backoff until the operator stopped)."""
    gate, entered = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    async def blocked(ctx: StepContext) -> Mapping[str, Any]:
        calls.append(1)
        entered.set()
        await gate.wait()
        raise TemporaryError("EnvironmentMissing", 'Environment "c8-env" not found')

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": blocked}))
    rec, _, _, _ = make(tmp_path, kind=kind)
    metrics = rec._metrics

    async def scenario() -> None:
        running = asyncio.create_task(rec.on_event("ADDED", body()))
        await entered.wait()
        await rec.on_event("DELETED", body())
        gate.set()
        await running

    asyncio.run(scenario())
    assert calls == [1] and rec.retries_pending() == 0 and rec.queue_depth() == 0
    assert metrics.value("stead_retries_dropped_total", kind="Environment") == 1
    assert metrics.value("stead_retries_total", kind="Environment") == 0


def test_a_pending_retry_of_an_object_that_goes_is_cancelled(tmp_path: Path) -> None:
    rec, _, _, _ = make(tmp_path, backoff=Backoff(base=60.0, cap=60.0))  # a retry far in the future

    async def failing(ctx: StepContext) -> Mapping[str, Any]:
        raise TemporaryError("EnvironmentMissing", "not found")

    rec.kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": failing}))

    async def scenario() -> tuple[int, int]:
        await rec.on_event("ADDED", body())
        before = rec.retries_pending()
        await rec.on_event("DELETED", body())
        return before, rec.retries_pending()

    assert asyncio.run(scenario()) == (1, 0)


def test_waiting_is_logged_as_waiting_not_as_a_retry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def run_in_progress(ctx: StepContext) -> Mapping[str, Any]:
        calls.append(1)
        if len(calls) < 3:
            raise TemporaryError("CreateRunning", "running the create action", delay=0.01, waiting=True)
        return {}

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": run_in_progress}))
    rec, writer, events, _ = make(tmp_path, kind=kind)

    async def scenario() -> None:
        await rec.on_event("ADDED", body())
        for _ in range(500):
            if writer.patches and writer.patches[-1][1].get("phase") == "Provisioned":
                return
            await asyncio.sleep(0.01)

    with caplog.at_level("DEBUG", logger="operators.runtime.engine.reconciler"):
        asyncio.run(scenario())
    assert len(calls) == 3
    messages = [r.getMessage() for r in caplog.records]
    assert not any("retry" in m for m in messages), messages
    assert sum("waiting: running the create action" in m for m in messages) == 2
    assert all(r.levelname == "DEBUG" for r in caplog.records)
    assert rec._metrics.value("stead_waits_total", kind="Environment") == 2
    assert ("e1", "Normal", "CreateRunning") in events.events


def test_a_lost_store_is_rebuilt_from_status_with_no_write_and_no_event(tmp_path: Path) -> None:
    rec, writer, _, _ = make(tmp_path / "before")
    asyncio.run(rec.on_event("ADDED", body()))
    written = writer.patches[0][1]
    lost, writer2, events2, store2 = make(tmp_path / "after")  # a new volume: an empty store
    asyncio.run(lost.on_event(None, body(status=written)))
    assert writer2.patches == [] and events2.events == []
    record = store2.get(object_key("Environment", "ns", "e1"))
    assert record is not None and record.status == written and record.generation == 1
    assert lost._metrics.value("stead_store_adopted_total", kind="Environment") == 1


def test_an_outage_that_changes_nothing_but_the_conditions_writes_nothing(tmp_path: Path) -> None:
    """An API server too slow to answer a step's GET: the object's conditions would flip to InternalError and
    back (two writes at the worst moment); facts the run found before it are still written."""
    from operators.runtime.kube.client import ApiUnreachable

    found: dict[str, Any] = {"facts": {}}

    async def slow_api(ctx: StepContext) -> Mapping[str, Any]:
        if found["facts"]:
            raise TemporaryError("Waiting", "for the API", facts=found["facts"]) from ApiUnreachable("timed out")
        raise ApiUnreachable("GET /apis/x: no answer from the API server within 30s")

    kind = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": slow_api}))
    rec, writer, _, _ = make(tmp_path, kind=kind, backoff=Backoff(base=60, cap=60))
    ready = {"observedGeneration": 1, "phase": "Provisioned",
             "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned"}]}
    asyncio.run(rec.on_event("MODIFIED", body(generation=2, status=ready)))
    assert writer.patches == []
    found["facts"] = {"nodeCount": 3}  # something the run learnt: that is written, with the conditions
    asyncio.run(rec.on_event("MODIFIED", body(generation=3, status=ready)))
    assert len(writer.patches) == 1 and writer.patches[0][1]["nodeCount"] == 3


class Claims:
    """Stands in for `shard.Sharding`: the projects held, and the write check on them."""

    def __init__(self, *projects: str) -> None:
        self.held = set(projects)
        self.refused: list[str | None] = []

    def owns(self, project: str) -> bool:
        return project in self.held

    def check(self, project: str | None) -> None:
        if project is not None and project not in self.held:
            self.refused.append(project)
            raise ApiError(403, f"not written: project {project} is not this replica's")


def sharded(tmp_path: Path, claims: Claims, kind: Any = KIND) -> tuple[Reconciler, RecordingWriter, RecordingEvents,
                                                                      LocalStore]:
    store = LocalStore(tmp_path / "store")
    writer, events = RecordingWriter(), RecordingEvents()
    rec = Reconciler(kind, store=store, ownership=claims, writer=writer, events=events, metrics=Metrics(),
                     clock=lambda: "T", backoff=FAST, services=SimpleNamespace(store=store), guard=claims)
    return rec, writer, events, store


def test_sharded_only_the_projects_held_are_acted_on_and_every_project_is_known(tmp_path: Path) -> None:
    claims = Claims("ns-a")
    rec, writer, events, _ = sharded(tmp_path, claims)

    async def scenario() -> None:
        await rec.on_event("ADDED", body("mine", namespace="ns-a"))
        await rec.on_event("ADDED", body("theirs", namespace="ns-b", uid="u2"))
        labelled = body("moved", namespace="ns-a", uid="u3")
        labelled["metadata"]["labels"] = {"stead.dev/project": "elsewhere"}
        await rec.on_event("ADDED", labelled)

    asyncio.run(scenario())
    assert [name for name, _ in writer.patches] == ["mine"] and events.events == [("mine", "Normal", "Provisioned")]
    assert rec.placements() == {("ns-a", "ns-a"), ("ns-b", "ns-b"), ("ns-a", "elsewhere")}


def test_sharded_a_write_for_a_project_lost_meanwhile_is_not_sent_nor_retried(tmp_path: Path) -> None:
    claims = Claims("ns-a")
    rec, writer, _, _ = sharded(tmp_path, claims)

    class Losing(RecordingWriter):
        async def patch_status(self, plural: str, namespace: str, name: str,
                               status: dict[str, Any]) -> dict[str, Any]:
            raise AssertionError("sent")

    async def scenario() -> None:
        obj = Observed.from_body(body(namespace="ns-a"))
        await rec.on_event("ADDED", body(namespace="ns-a", status={"phase": "Init"}))
        claims.held.clear()  # the claim went between the event and the write
        rec._writer = Losing()
        await rec.reconcile(object_key("Environment", "ns-a", "e1"), obj)
        await asyncio.sleep(0.1)  # a retry would have run by now

    asyncio.run(scenario())
    assert len(writer.patches) == 1 and claims.refused == []  # the reconcile saw the project gone first
    claims.held.add("ns-a")
    rec2, writer2, events2, _ = sharded(tmp_path / "2", Claims())
    rec2._ownership = Claims("ns-a")  # acts on the event, but may not write (the fence closed)
    asyncio.run(rec2.on_event("ADDED", body(namespace="ns-a")))
    assert writer2.patches == [] and events2.events == []
    assert rec2.retries_pending() == 1  # a status write that failed: retried (where the claim is checked again)
    asyncio.run(rec2.close())


def test_sharded_drain_cancels_work_in_flight_and_forgets_the_project(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def forever(ctx: StepContext) -> dict[str, Any]:
        started.set()
        await asyncio.sleep(60)
        return {}

    slow = dataclasses.replace(KIND, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": forever}),
                               cleanup=None)
    claims = Claims("ns-a", "ns-b")
    rec, _, _, store = sharded(tmp_path, claims, kind=slow)
    store.put(object_key(slow.kind, "ns-b", "kept"), store_record())

    async def scenario() -> float:
        reconcile = asyncio.create_task(rec.on_event("ADDED", body(namespace="ns-a")))
        await started.wait()
        claims.held.discard("ns-a")
        loop = asyncio.get_running_loop()
        began = loop.time()
        await rec.drain("ns-a", grace=0.1)
        took = loop.time() - began
        await asyncio.wait_for(reconcile, 1)  # the event's handler returns quietly
        return took

    took = asyncio.run(scenario())
    assert took < 1
    assert store.get(object_key(slow.kind, "ns-a", "e1")) is None
    assert store.get(object_key(slow.kind, "ns-b", "kept")) is not None  # another project's: kept
    assert rec.queue_depth() == 0 and rec.retries_pending() == 0


def test_sharded_acquiring_drops_stale_records_and_acts_on_the_fresh_listing(tmp_path: Path) -> None:
    claims = Claims()
    rec, writer, _, store = sharded(tmp_path, claims)
    key = object_key("Environment", "ns-a", "e1")
    store.put(key, store_record(generation=1))  # from an earlier epoch of ours (A -> B -> A)

    async def scenario() -> None:
        rec.rebuild("ns-a", [body(namespace="ns-a", generation=2)])
        assert store.get(key) is None  # dropped before anything is acted on
        await rec.on_event("MODIFIED", body(namespace="ns-a", generation=3))  # during the acquisition
        claims.held.add("ns-a")
        rec.resume("ns-a")
        await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert [name for name, _ in writer.patches] == ["e1"]
    assert writer.patches[0][1]["observedGeneration"] == 3  # the freshest body, not the listing's
    record = store.get(key)
    assert record is not None and record.generation == 3


def store_record(generation: int = 1) -> Any:
    from operators.runtime.core.pipeline import StoredRecord

    return StoredRecord("u1", generation, {"release": "r1"}, {"phase": "Provisioned"})
