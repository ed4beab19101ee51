"""What the tests of the three kinds share: a catalog (a Blueprint and a ServiceEntity) in a local store, the
shared fake API server, services as a step sees them, an instance's object as the reconciler sees it, and one
reconcile of it as the reconciler runs it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from operators.lsm.kinds import SERVICE_INSTANCE_KIND as KIND
from operators.runtime.core import pipeline as engine
from operators.runtime.core.kinds import AdmissionRequest
from operators.runtime.core.pipeline import Observed, StepContext, StoredRecord
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi, merge

NS = "ns"
APPS = custom_path("apps", NS)
RUNS = custom_path("actionruns", NS)
INSTANCES = custom_path("serviceinstances", NS)


def greeter_blueprint() -> dict[str, Any]:
    """Creating publishes an address; an application action `update` (what an update of the inputs runs)."""
    return {
        "active": True,
        "variables": [{"name": "who", "value": "world", "runtime": True, "regex": "[a-z]+"},
                      {"name": "region", "value": "eu", "runtime": True, "options": ["eu", "us"]}],
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
            {"name": "publish", "type": "setvar", "variables": ["address"],
             "script": "echo address=host-@@{who}@@"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
        "actions": [{"name": "update", "tasks": [{"name": "apply", "type": "exec", "script": "echo @@{who}@@"}]}],
    }


def greeter_entity(lifecycle: Mapping[str, Any] | None = None, realized: bool = True, **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attributes": [
            {"name": "name", "type": "string"},
            {"name": "who", "type": "string", "modifier": "rw+"},
            {"name": "region", "type": "string"},
            {"name": "address", "type": "string", "modifier": "r", "optional": True},
        ],
        "identity": "name",
        "lifecycle": dict(lifecycle or {"builtin": "simple"}),
        **spec,
    }
    if realized:
        out["realization"] = {
            "blueprint": "greeter",
            "inputs": [{"variable": "who", "attribute": "who"}, {"variable": "region", "attribute": "region"}],
            "outputs": [{"attribute": "address", "property": "Service_S_address", "deployment": "tier"}]}
    return out


class RecordingEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        self.events.append((obj.name, type_, reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, _, reason, _ in self.events]


@dataclass
class World:
    """Services as a kind's step sees them: the fake API, a local store, Events."""

    kube: FakeApi
    store: LocalStore
    events: RecordingEvents = field(default_factory=RecordingEvents)

    def put(self, kind: str, name: str, spec: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> None:
        """A Provisioned object in the store (as if its pipeline had run)."""
        self.store.put(object_key(kind, NS, name), StoredRecord(f"u-{name}", 1, dict(spec), dict(status or {})))

    def catalog(self, entity: Mapping[str, Any] | None = None) -> None:
        self.put("Blueprint", "greeter", greeter_blueprint(), {"state": "Active"})
        self.put("ServiceEntity", "greeter", entity or greeter_entity())
        self.kube.add(f"/api/v1/namespaces/{NS}", {"status": {"phase": "Active"}})

    def step(self, obj: Observed, facts: Mapping[str, Any] | None = None) -> StepContext:
        return StepContext(obj=obj, facts=dict(facts or {}), services=self)  # type: ignore[arg-type]

    def request(self, operation: str, spec: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None,
                name: str = "db-1") -> AdmissionRequest:
        return AdmissionRequest(operation=operation, namespace=NS, name=name, labels={},
                                spec=dict(spec or (old or {}).get("spec") or {}), old=old, dry_run=False,
                                services=self)

    async def admit(self, operation: str, spec: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None,
                    name: str = "db-1") -> None:
        assert KIND.admission is not None
        await KIND.admission(self.request(operation, spec, old, name))


def make_world(tmp_path: Path, kube: FakeApi) -> World:
    return World(kube, LocalStore(tmp_path / "store"))


def instance_spec(name: str = "db-1", entity: str = "greeter", **attributes: Any) -> dict[str, Any]:
    return {"entity": entity, "attributes": {"name": name, "who": "one", "region": "eu", **attributes}}


def observed(spec: Mapping[str, Any], status: Mapping[str, Any] | None = None, *, name: str = "db-1",
             generation: int = 1, uid: str | None = None, deleting: bool = False) -> Observed:
    return Observed(kind="ServiceInstance", namespace=NS, name=name, uid=uid or f"u-{name}", generation=generation,
                    labels={}, spec=dict(spec), status=dict(status or {}), deleting=deleting,
                    finalizers=("stead.dev/cleanup",))


def body(obj: Observed, created: str = "2025-01-01T00:00:00Z") -> dict[str, Any]:
    """The object as the API server would list it."""
    return {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
            "metadata": {"name": obj.name, "namespace": obj.namespace, "uid": obj.uid, "generation": obj.generation,
                         "creationTimestamp": created},
            "spec": dict(obj.spec), "status": dict(obj.status)}


def ready_app(kube: FakeApi, name: str = "db-1", *, state: str = "running", address: str | None = "host-one",
              snapshot: bool = True, stalled: str | None = None, lock: bool = False) -> dict[str, Any]:
    """Make the App of an instance look as its own pipeline leaves it: Ready at its generation (or Stalled)."""
    path = f"{APPS}/{name}"
    app = kube.objects[path]
    app["metadata"]["finalizers"] = ["stead.dev/cleanup"]  # as the App's mutating webhook adds it
    generation = app["metadata"]["generation"]
    replicas = [{"index": 0, "name": "tier-0", "properties": {"Service_S_address": address} if address else {}}]
    why = stalled or ""
    conditions = [{"type": "Ready", "status": "False" if stalled else "True", "reason": "R", "message": why},
                  {"type": "Stalled", "status": "True" if stalled else "False", "reason": "R", "message": why}]
    app["status"] = {
        "observedGeneration": generation, "state": state, "conditions": conditions,
        "entities": {"deployments": [{"name": "tier", "substrate": "host", "replicas": replicas}]},
        **({"snapshot": {"name": "greeter", "uid": "u-greeter", "generation": 1, "spec": greeter_blueprint(),
                         "compiledState": None}} if snapshot else {}),
        **({"lock": {"lockedBy": "x", "since": "2999-01-01T00:00:00Z", "ttlSeconds": 60}} if lock else {}),
    }
    return app


def run(world: World, obj: Observed, start: str = "Init") -> tuple[Observed, engine.Outcome]:
    """One reconcile as the reconciler makes it: the steps, then the status written with a merge patch."""
    outcome = asyncio.run(engine.run(KIND.pipeline, obj, start, services=world))
    status = engine.compose_status(obj, outcome, "2025-01-01T00:00:00Z")
    patch = engine.status_patch(obj.status, status)
    return replace(obj, status=merge(dict(obj.status), patch) if patch else dict(obj.status)), outcome


def walk(status: dict[str, Any], since: int = 0) -> list[tuple[str | None, str, str]]:
    return [(e.get("from"), e["to"], e["trigger"]) for e in status["log"] if e["version"] > since]


def up(world: World) -> Observed:
    """An instance created and deployed: in up, at version 4, its App running."""
    obj, _ = run(world, observed(instance_spec()))
    ready_app(world.kube)
    obj, outcome = run(world, obj)
    assert outcome.error is None and obj.status["state"] == "up"
    return obj


def updated(obj: Observed, **attributes: Any) -> Observed:
    spec = {**obj.spec, "attributes": {**obj.spec["attributes"], **attributes}}
    return replace(obj, spec=spec, generation=obj.generation + 1)


def requested(obj: Observed, target: str, version: int | None = None) -> Observed:
    request = {"target": target, "currentVersion": version or obj.status["version"]}
    return replace(obj, spec={**obj.spec, "stateRequest": request}, generation=obj.generation + 1)
