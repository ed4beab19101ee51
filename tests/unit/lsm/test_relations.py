"""Inter-service relations: arity and names, targets, the gate on deployment, who refers to whom; refused at
admission (a creation naming what it may not, a delete of an instance still named) and held in the pipeline
(a deployment waits for what it names to be up, and goes on when told)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from operators.lsm.attributes import client_problems, entity_problems, set_problems
from operators.lsm.builtin import BUILTINS
from operators.lsm.converge import RELATIONS_BACKSTOP_SECONDS
from operators.lsm.kinds import SERVICE_INSTANCE_KIND
from operators.lsm.models import ServiceEntitySpec
from operators.lsm.relations import (
    Target,
    awaits_deployment,
    mentions,
    references,
    referrers,
    referrers_text,
    shape_problems,
    target,
    target_problems,
    waiting_for,
)
from operators.runtime.core.kinds import Refusal
from operators.runtime.core.pipeline import Pipeline, StepContext, TemporaryError
from operators.runtime.core.ring import Ownership, StaticMembership
from operators.runtime.core.store import LocalStore
from operators.runtime.engine.reconciler import Reconciler
from operators.runtime.process import _link_dependents
from operators.runtime.serving.metrics import Metrics
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import INSTANCES, RecordingEvents, World, body, make_world, observed, run

SITE: dict[str, Any] = {"attributes": [{"name": "name", "type": "string"}], "identity": "name",
                        "lifecycle": {"builtin": "simple"}}
LINK: dict[str, Any] = {
    "attributes": [{"name": "name", "type": "string"}, {"name": "note", "type": "string", "optional": True}],
    "interServiceRelations": [
        {"name": "sites", "entityType": "site", "lowerLimit": 2, "upperLimit": 2},
        {"name": "backup", "entityType": "site", "lowerLimit": 0, "modifier": "rw+"},
    ],
    "identity": "name",
    "lifecycle": {"builtin": "simple"},
}
ENTITY = ServiceEntitySpec.model_validate(LINK)


def site_body(name: str, *, state: str = "up", ready: bool = True, entity: str = "site",
              deleting: bool = False) -> dict[str, Any]:
    """A site as the API server has it: settled Ready in up (model state active), or not."""
    obj = body(observed({"entity": entity, "attributes": {"name": name}}, {
        "state": state, "modelState": "active" if state in ("up", "creating") else "candidate",
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "R", "message": ""}],
    }, name=name))
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return obj


# --- pure rules ---------------------------------------------------------------------------------------


def test_a_relation_is_an_attribute_of_its_own_with_arity_and_names_of_this_namespace() -> None:
    path = "spec.attributes"
    good = {"name": "l-1", "sites": ["a", "b"]}
    assert set_problems(ENTITY, "link", good, path) == []
    assert set_problems(ENTITY, "link", {"name": "l-1"}, path) == [f"{path}.sites: required"]  # lowerLimit 2
    assert set_problems(ENTITY, "link", {**good, "backup": ["a"]}, path) == [f"{path}.backup: expected string, "
                                                                             "got list"]  # upperLimit 1: one name
    assert shape_problems(ENTITY, {"sites": ["a"]}, path) == [
        f"{path}.sites: names 1 instances; relation sites takes 2..2 instances of site"]
    assert shape_problems(ENTITY, {"sites": ["a", "other/b"], "backup": "Bad_Name"}, path) == [
        f"{path}.sites[1]: 'other/b' names another namespace: a relation names service instances of its own "
        "namespace only, by name",
        f"{path}.backup: 'Bad_Name' is not the name of a service instance (lowercase letters, digits, '-' and '.')"]
    assert shape_problems(ENTITY, {"sites": ["a", "a"]}, path) == [f"{path}.sites[1]: a is named twice"]
    # an unknown name is still refused, and the relations are listed among what there is
    assert client_problems(ENTITY, "link", {"colour": 1})[0][1].endswith("(attributes: sites, backup, name, note)")


def test_an_entitys_relations_must_fit_and_not_shadow_an_attribute() -> None:
    broken = ServiceEntitySpec.model_validate({**LINK, "interServiceRelations": [
        {"name": "note", "entityType": "site"}, {"name": "many", "entityType": "site", "lowerLimit": 3,
                                                 "upperLimit": 2}]})
    assert entity_problems(broken) == [
        "spec.interServiceRelations[0].name: note is also an attribute: a relation is an attribute of its own",
        "spec.interServiceRelations[1].lowerLimit: 3 is above upperLimit 2"]
    assert entity_problems(ENTITY) == []


def test_targets_must_exist_be_of_the_relations_entity_and_not_be_going() -> None:
    found: dict[str, Target | None] = {"a": target(site_body("a")), "b": None,
                                       "c": target(site_body("c", entity="router")),
                                       "d": target(site_body("d", deleting=True))}
    values = {"sites": ["a", "b"], "backup": "c"}
    assert target_problems(ENTITY, values, "spec.attributes", found, "ns") == [
        "spec.attributes.sites: no service instance 'b' in namespace ns (relation sites names instances of site)",
        "spec.attributes.backup: service instance c is of entity router, not site (relation backup)"]
    assert target_problems(ENTITY, {"backup": "d"}, "p", found, "ns") == ["p.backup: service instance d is being "
                                                                          "deleted"]
    assert references(ENTITY, values, {"backup": "a"}, None) == ["a", "b", "c"]


def test_up_means_settled_ready_in_a_state_that_deploys() -> None:
    assert target(site_body("a")).up
    assert not target(site_body("a", state="creating", ready=False)).up  # its App still being deployed
    assert not target(site_body("a", state="acknowledged")).up  # Ready, but waiting: nothing deployed
    assert not target(site_body("a", deleting=True)).up
    stale = site_body("a")
    stale["metadata"]["generation"] = 2  # Ready, but for a spec it has not seen yet
    assert not target(stale).up
    found = {"a": target(site_body("a")), "b": target(site_body("b", state="creating", ready=False))}
    assert waiting_for(ENTITY, {"sites": ["a", "b"]}, found) == ["sites: b (state creating, not up)"]
    # the gate holds where a deployment moves the instance on (deleting purges: no gate), not on up's repair
    simple = BUILTINS["simple"]
    assert [s.name for s in simple.states if awaits_deployment(simple, s.name)] == [
        "creating", "failed", "update_inprogress", "update_failed", "rollback", "deleting"]


def test_referrers_are_the_instances_that_name_one_in_a_relation_of_any_set() -> None:
    entities = {"link": ENTITY}
    link = body(observed({"entity": "link", "attributes": {"name": "l-1", "sites": ["a", "b"]}}, name="l-1"))
    old = body(observed({"entity": "link", "attributes": {"name": "l-2", "sites": ["c", "d"]}},
                        {"activeAttributes": {"name": "l-2", "sites": ["a", "d"]}}, name="l-2"))
    gone = body(observed({"entity": "link", "attributes": {"name": "l-3", "sites": ["a", "b"]}},
                         {"deleted": True}, name="l-3"))
    noted = body(observed({"entity": "link", "attributes": {"name": "l-4", "note": "a", "sites": ["x", "y"]}},
                          name="l-4"))
    found = referrers("a", [link, old, gone, noted], entities)
    assert found == [("l-1", "sites"), ("l-2", "sites")]  # a plain attribute holding "a" is no relation
    assert referrers_text([*found, ("l-1", "backup")]) == "l-1 (sites, backup), l-2 (sites)"
    assert mentions(link["spec"], "a") and mentions(noted["spec"], "a") and not mentions(link["spec"], "c")


# --- admission and the pipeline -------------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    w = make_world(tmp_path, kube)
    w.catalog()
    w.put("ServiceEntity", "site", SITE)
    w.put("ServiceEntity", "link", LINK)
    kube.add("/apis/stead.dev/v1alpha1/namespaces/ns/serviceentities/link",
             {"metadata": {"name": "link", "namespace": "ns"}, "spec": LINK})
    kube.add("/apis/stead.dev/v1alpha1/namespaces/ns/serviceentities/site",
             {"metadata": {"name": "site", "namespace": "ns"}, "spec": SITE})
    return w


def link_spec(*sites: str, **more: Any) -> dict[str, Any]:
    return {"entity": "link", "attributes": {"name": "l-1", "sites": list(sites), **more}}


def refusal(world: World, operation: str, spec: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None,
            name: str = "l-1") -> Refusal:
    with pytest.raises(Refusal) as caught:
        asyncio.run(world.admit(operation, spec, old, name))
    return caught.value


def test_a_creation_naming_absent_foreign_or_misshapen_instances_is_refused_at_admission(world: World) -> None:
    world.kube.add(f"{INSTANCES}/a", site_body("a"))
    world.kube.add(f"{INSTANCES}/r", site_body("r", entity="router"))
    missing = refusal(world, "CREATE", link_spec("a", "b"))
    assert missing.code == 422 and missing.message == ("spec.attributes.sites: no service instance 'b' in namespace "
                                                       "ns (relation sites names instances of site)")
    assert "service instance r is of entity router, not site" in refusal(world, "CREATE", link_spec("a", "r")).message
    assert "'other/b' names another namespace" in refusal(world, "CREATE", link_spec("a", "other/b")).message
    assert "takes 2..2 instances" in refusal(world, "CREATE", link_spec("a")).message
    world.kube.add(f"{INSTANCES}/b", site_body("b", state="creating", ready=False))
    asyncio.run(world.admit("CREATE", link_spec("a", "b")))  # b not up yet: admitted, the deployment waits
    # an update is checked on the relations it changes; an rw one may not change at all
    old = body(observed(link_spec("a", "b"), {"state": "up", "version": 4,
                                             "clientAttributes": link_spec("a", "b")["attributes"]}, name="l-1"))
    assert "no service instance 'z'" in refusal(world, "UPDATE", link_spec("a", "b", backup="z"), old).message
    assert "set at creation only" in refusal(world, "UPDATE", link_spec("a", "r"), old).message
    asyncio.run(world.admit("UPDATE", link_spec("a", "b", backup="a"), old))


def test_an_instance_still_named_cannot_be_deleted_and_the_refusal_names_its_referrers(world: World) -> None:
    world.kube.add(f"{INSTANCES}/a", site_body("a"))
    world.kube.add(f"{INSTANCES}/b", site_body("b"))
    world.kube.add(f"{INSTANCES}/l-1", body(observed(link_spec("a", "b"), {"state": "up"}, name="l-1")))
    refused = refusal(world, "DELETE", None, world.kube.objects[f"{INSTANCES}/a"], name="a")
    assert refused.code == 409 and refused.message == (
        "service instance a is still referenced by l-1 (sites): delete those instances, or change their "
        "relations, first")
    del world.kube.objects[f"{INSTANCES}/l-1"]
    asyncio.run(world.admit("DELETE", None, world.kube.objects[f"{INSTANCES}/a"], name="a"))


def test_a_deployment_waits_for_what_it_names_to_be_up_then_goes_on(world: World) -> None:
    world.kube.add(f"{INSTANCES}/a", site_body("a"))
    world.kube.add(f"{INSTANCES}/b", site_body("b", state="creating", ready=False))
    obj, outcome = run(world, observed(link_spec("a", "b"), name="l-1"))
    assert obj.status["state"] == "creating" and obj.status["references"] == ["a", "b"]
    assert isinstance(outcome.error, TemporaryError) and outcome.error.reason == "WaitingForRelations"
    assert outcome.error.delay == RELATIONS_BACKSTOP_SECONDS  # told when b changes, not polled
    assert "sites: b (state creating, not up)" in outcome.error.message
    world.kube.objects[f"{INSTANCES}/b"] = site_body("b")
    obj, outcome = run(world, obj, "Realizing")
    assert outcome.error is None and obj.status["state"] == "up"


def test_a_bypassed_webhook_leaves_a_bad_target_to_validation(world: World) -> None:
    world.kube.add(f"{INSTANCES}/a", site_body("a"))
    obj, _ = run(world, observed(link_spec("a", "zz"), name="l-1"))
    assert obj.status["state"] == "rejected"
    assert obj.status["validationProblems"] == [
        "spec.attributes.sites: no service instance 'zz' in namespace ns (relation sites names instances of site)"]


# --- the recheck of referrers -------------------------------------------------------------------------------


def test_a_referrer_is_rechecked_when_what_it_names_moves_and_a_cycle_of_relations_ends(tmp_path: Path) -> None:
    runs: list[str] = []

    async def step(ctx: StepContext) -> Mapping[str, Any]:
        runs.append(ctx.obj.name)
        return {}

    kind = dataclasses.replace(SERVICE_INSTANCE_KIND, pipeline=Pipeline(phases=("Init", "Provisioned"),
                                                                        steps={"Init": step}), cleanup=None)

    class Writer:
        async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> Any:
            return {**bodies[name], "status": status}

    bodies = {name: {"kind": "ServiceInstance", "metadata": {
        "name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1, "resourceVersion": "1"},
        "spec": {"entity": "e", "attributes": {"name": name, "peer": peer}}}
        for name, peer in (("a", "b"), ("b", "a"), ("c", "x"))}
    rec = Reconciler(kind, store=LocalStore(tmp_path / "store"),
                     ownership=Ownership("stead-0", StaticMembership(["stead-0"])), writer=Writer(),
                     events=RecordingEvents(), metrics=Metrics(), clock=lambda: "T")
    _link_dependents([rec])
    assert rec.on_ready_change is not None

    async def scenario() -> None:
        for name in bodies:
            await rec.on_event("ADDED", dict(bodies[name]))
        runs.clear()
        await rec.on_ready_change("ServiceInstance", "ns", "a")  # a moved: b names it, and a names b

    asyncio.run(asyncio.wait_for(scenario(), 10))
    # b is rechecked (it names a), then a (it names b); a is not rechecked for itself, and the chain ends there
    assert runs == ["b", "a"]

