"""How the three kinds are served: the catalog, the webhooks (DELETE for ServiceInstance only), the rechecks
of an instance when its App (named after it) changes readiness, and status written as merge patches."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from operators import catalog
from operators.lsm import KINDS
from operators.lsm.builtin import BUILTINS
from operators.lsm.kinds import (
    CLUSTER_LIFECYCLE_KIND,
    LIFECYCLE_KIND,
    SERVICE_ENTITY_KIND,
    SERVICE_INSTANCE_KIND,
    SERVICE_ORDER_KIND,
)
from operators.lsm.models import LifecycleSpec, ServiceInstanceStatus
from operators.lsm.wire import INSTANCE_FIELDS, instance_facts, merge_ready, read_instance_status
from operators.runtime.core.kinds import named_after
from operators.runtime.core.pipeline import Observed, Pipeline, StepContext
from operators.runtime.core.ring import Ownership, StaticMembership
from operators.runtime.core.store import LocalStore
from operators.runtime.engine.reconciler import Reconciler
from operators.runtime.kube.admission import mutating_configuration, validating_configuration
from operators.runtime.kube.crds import crd_for, shipped_objects
from operators.runtime.serving.metrics import Metrics
from tests.unit.fakeapi import merge
from tests.unit.lsm.kindsupport import RecordingEvents

ROOT = Path(__file__).resolve().parents[3]


def test_the_catalog_serves_the_five_kinds() -> None:
    assert KINDS == (LIFECYCLE_KIND, CLUSTER_LIFECYCLE_KIND, SERVICE_ENTITY_KIND, SERVICE_INSTANCE_KIND,
                     SERVICE_ORDER_KIND)
    assert all(kind in catalog.KINDS for kind in KINDS)
    assert [k.short_names for k in KINDS] == [("lc",), ("clc",), ("se",), ("si",), ("so",)]


def test_cluster_lifecycles_are_cluster_scoped_with_the_lifecycle_schema_and_webhook() -> None:
    crd, namespaced = crd_for(CLUSTER_LIFECYCLE_KIND), crd_for(LIFECYCLE_KIND)
    assert crd["spec"]["scope"] == "Cluster" and namespaced["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["shortNames"] == ["clc"]
    schema, lc_schema = (c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] for c in (crd, namespaced))
    assert schema["properties"] == lc_schema["properties"]
    config = validating_configuration(catalog.KINDS, "https://127.0.0.1:9443", b"CA")
    scopes = {hook["name"]: hook["rules"][0]["scope"] for hook in config["webhooks"]}
    assert scopes.pop("clusterlifecycles.stead.dev") == "Cluster"
    assert set(scopes.values()) == {"Namespaced"}


def test_the_shipped_cluster_lifecycles_are_the_builtins() -> None:
    objects = shipped_objects(CLUSTER_LIFECYCLE_KIND)
    assert [o["metadata"]["name"] for o in objects] == ["simple", "service", "testing-basic-lifecycle"]
    assert all(o["kind"] == "ClusterLifecycle" and "namespace" not in o["metadata"] for o in objects)
    assert {name: LifecycleSpec.model_validate(o["spec"]) for name, o in zip(BUILTINS, objects, strict=True)} \
        == dict(BUILTINS)
    assert not any(CLUSTER_LIFECYCLE_KIND.check_spec(o["spec"]) for o in objects)
    for obj in objects:  # the chart's copies are the same data
        path = ROOT / "charts/stead/files/objects" / f"clusterlifecycles-{obj['metadata']['name']}.yaml"
        assert yaml.safe_load(path.read_text()) == obj


def test_only_the_service_instance_webhook_sees_deletes() -> None:
    config = validating_configuration(catalog.KINDS, "https://127.0.0.1:9443", b"CA")
    operations = {hook["name"]: hook["rules"][0]["operations"] for hook in config["webhooks"]}
    assert operations.pop("serviceinstances.stead.dev") == ["CREATE", "UPDATE", "DELETE"]
    assert set(map(tuple, operations.values())) == {("CREATE", "UPDATE")}
    assert {"lifecycles.stead.dev", "serviceentities.stead.dev"} <= set(operations)
    mutating = mutating_configuration(catalog.KINDS, "https://127.0.0.1:9443", b"CA")
    assert mutating is not None  # the instance's finalizer comes with its creation, no PATCH of its own
    hooks = {hook["name"]: hook["rules"][0]["operations"] for hook in mutating["webhooks"]}
    assert hooks["serviceinstances.stead.dev"] == ["CREATE", "UPDATE"]


def test_the_instance_crd_has_the_columns_a_user_reads() -> None:
    crd = crd_for(SERVICE_INSTANCE_KIND)
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Phase", "Ready", "Entity", "Identity", "State", "Version", "EntityVersion", "References",
                       "Age"]
    wide = {c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"] if c.get("priority")}
    assert wide == {"References"}  # -o wide only: the default columns stay as they were
    assert crd["metadata"]["annotations"]["stead.dev/finalizer"] == "true"


def test_an_instance_is_checked_again_when_its_app_changes_readiness_and_from_what_was_written(
        tmp_path: Path) -> None:
    runs: list[tuple[str, Any]] = []

    async def step(ctx: StepContext) -> Mapping[str, Any]:
        runs.append((ctx.obj.name, ctx.obj.status.get("seen")))
        return {"seen": len(runs)}

    kind = dataclasses.replace(SERVICE_INSTANCE_KIND, pipeline=Pipeline(phases=("Init", "Provisioned"),
                                                                        steps={"Init": step}), cleanup=None)
    bodies: dict[str, dict[str, Any]] = {}

    class Writer:
        """Answers a status PATCH with the object, as the API server does."""

        async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]
                               ) -> dict[str, Any]:
            found = bodies[name]
            found["status"] = merge(found.get("status") or {}, status)
            found["metadata"]["resourceVersion"] = str(int(found["metadata"]["resourceVersion"]) + 1)
            return found

    def si(name: str) -> dict[str, Any]:
        bodies[name] = {"kind": "ServiceInstance", "metadata": {
            "name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1, "resourceVersion": "1"},
            "spec": {"entity": "greeter"}}
        return dict(bodies[name])

    store = LocalStore(tmp_path / "store")
    rec = Reconciler(kind, store=store, ownership=Ownership("stead-0", StaticMembership(["stead-0"])),
                     writer=Writer(), events=RecordingEvents(), metrics=Metrics(), clock=lambda: "T")

    async def scenario() -> None:
        await rec.on_event("ADDED", si("db-1"))
        await rec.on_event("ADDED", si("db-2"))
        await rec.recheck_referrers("App", "ns", "db-2")  # the App db-2 became Ready: only its instance
        await rec.recheck_referrers("App", "other", "db-1")

    asyncio.run(scenario())
    # the recheck starts from the status the reconciler wrote, not from the body it saw before writing it
    assert runs == [("db-1", None), ("db-2", None), ("db-2", 2)]
    assert SERVICE_INSTANCE_KIND.depends_on["App"] is named_after and not named_after({}, "db-1")
    assert SERVICE_INSTANCE_KIND.depends_on["ServiceEntity"]({"entity": "greeter"}, "greeter")


def test_removed_keys_of_nested_objects_are_sent_as_nulls_and_dropped_on_reading() -> None:
    assert merge_ready({"a": 1, "b": {"c": 1, "d": 2}, "e": [1]}, {"a": 1, "b": {"c": 1}}) == {
        "a": 1, "b": {"c": 1, "d": None}, "e": None}
    assert merge_ready({"a": 1}, None) is None and merge_ready(None, {"a": 1}) == {"a": 1}
    old = {"state": "up", "activeAttributes": {"who": "one", "size": 2, "tags": {"x": 1, "y": 2}},
           "stateRequest": {"target": "up", "currentVersion": 3, "message": "m"}, "phase": "Provisioned"}
    new = ServiceInstanceStatus(state="up", active_attributes={"who": "two", "tags": {"x": 1}},
                                state_request={"target": "up", "current_version": 5})  # type: ignore[arg-type]
    facts = instance_facts(old, new)
    assert set(facts) == set(INSTANCE_FIELDS) and "phase" not in facts
    assert facts["activeAttributes"] == {"who": "two", "size": None, "tags": {"x": 1, "y": None}}
    assert facts["stateRequest"] == {"target": "up", "currentVersion": 5, "message": None}
    assert facts["version"] is None and facts["log"] == []
    written = merge(old, {k: v for k, v in facts.items() if old.get(k) != v})
    assert written["activeAttributes"] == {"who": "two", "tags": {"x": 1}}
    again = read_instance_status({**written, **facts})  # an in-memory status with its marks reads the same
    assert again.active_attributes == {"who": "two", "tags": {"x": 1}} and again.state_request is not None
    assert again.state_request.message is None


def test_the_examples_are_valid_and_the_builtin_one_is_the_code() -> None:
    root = Path(__file__).resolve().parents[3] / "examples"
    kinds = {k.kind: k for k in KINDS}
    seen = set()
    for path in sorted(root.glob("service-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None or doc["kind"] not in kinds:
                continue
            seen.add(doc["kind"])
            assert kinds[doc["kind"]].check_spec(doc["spec"]) == [], path
    assert seen == set(kinds) - {"ClusterLifecycle"}  # the ClusterLifecycles are shipped (files/objects)
    from operators.lsm import BUILTINS
    from operators.lsm.models import LifecycleSpec

    simple = yaml.safe_load((root / "service-lifecycle-simple.yaml").read_text())
    assert LifecycleSpec.model_validate(simple["spec"]) == BUILTINS["simple"]


def test_an_observed_instance_reads_as_the_engine_wants_it() -> None:
    obj = Observed(kind="ServiceInstance", namespace="ns", name="x", uid="u", generation=1, labels={}, spec={},
                   status={"state": "up", "version": 2, "conditions": [], "someoneElse": 1,
                           "candidateAttributes": {"a": None}})
    status = read_instance_status(obj.status)
    assert status.state == "up" and status.candidate_attributes == {}
