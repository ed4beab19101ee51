"""Lifecycle and ServiceEntity as kinds: checked at apply time naming the field, Ready when what they refer
to is found and fits, Stalled naming what is missing, and checked again when it appears."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from operators.lsm.builtin import BUILTINS
from operators.lsm.entity import check_lifecycle, resolve_entity
from operators.lsm.kinds import LIFECYCLE_KIND, SERVICE_ENTITY_KIND
from operators.lsm.models import LifecycleRef, LifecycleSpec
from operators.runtime.core.kinds import Refusal
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext, TemporaryError
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import INSTANCES, NS, World, body, greeter_blueprint, greeter_entity, make_world
from tests.unit.lsm.kindsupport import instance_spec as spec_of
from tests.unit.lsm.kindsupport import observed as instance

TINY: dict[str, Any] = {
    "initialState": "start",
    "states": [{"name": "start", "validateSelf": "candidate"}, {"name": "designed", "validateOthers": "candidate"},
               {"name": "up", "exportResources": True}, {"name": "gone", "deleted": True}],
    "transfers": [{"source": "start", "target": "designed", "auto": True, "configName": "auto_design"},
                  {"source": "designed", "target": "up", "apiSetState": True, "targetOperation": "promote"},
                  {"source": "up", "target": "gone", "onDelete": True}],
}


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    return make_world(tmp_path, kube)


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> Observed:
    return Observed(kind=kind, namespace=NS, name=name, uid=f"u-{name}", generation=1, labels={}, spec=spec,
                    status=status or {})


def test_a_lifecycle_is_refused_at_apply_time_naming_the_field() -> None:
    broken = copy.deepcopy(TINY)
    broken["transfers"][0]["target"] = "nowhere"
    broken["transfers"][1]["targetOperation"] = "shuffle"
    problems = LIFECYCLE_KIND.check_spec(broken)  # what the webhook answers (422)
    assert problems == ["spec.transfers[1].targetOperation: Input should be 'clear candidate', 'clear active', "
                        "'clear rollback', 'promote' or 'rollback'"]
    broken["transfers"][1]["targetOperation"] = "promote"
    assert LIFECYCLE_KIND.check_spec(broken)[0] == ('spec.transfers[0].target: unknown state "nowhere" (states: '
                                                    "start, designed, up, gone)")
    with pytest.raises(PermanentError) as stalled:  # an object that bypassed the webhook
        asyncio.run(check_lifecycle(StepContext(obj("Lifecycle", "tiny", broken), {})))
    assert stalled.value.reason == "InvalidSpec" and "nowhere" in stalled.value.message


def test_a_lifecycle_shows_each_states_model_state_and_drops_removed_ones() -> None:
    facts = asyncio.run(check_lifecycle(StepContext(obj("Lifecycle", "tiny", TINY, {"modelStates": {"old": "active"}}),
                                                  {})))
    assert facts == {"stateCount": 4, "transferCount": 3, "modelStates": {
        "old": None, "start": "candidate", "designed": "designed", "up": "active", "gone": "inactive"}}


def test_an_entity_is_ready_with_a_builtin_lifecycle_and_an_active_blueprint(world: World) -> None:
    world.put("Blueprint", "greeter", greeter_blueprint(), {"state": "Active"})
    entity = greeter_entity(config={})
    assert SERVICE_ENTITY_KIND.check_spec(entity) == []
    facts = asyncio.run(resolve_entity(world.step(obj("ServiceEntity", "greeter", entity))))
    assert facts == {"lifecycle": "builtin:simple", "attributeCount": 4, "blueprint": "greeter",
                     "autoTransfersOff": None, "version": 1, "versions": [1]}


def test_an_entity_stalls_naming_the_missing_lifecycle_and_what_exists(world: World) -> None:
    world.put("Lifecycle", "other", TINY)
    with pytest.raises(PermanentError) as stalled:
        asyncio.run(resolve_entity(world.step(obj("ServiceEntity", "e", greeter_entity({"name": "mine"},
                                                                                      realized=False)))))
    assert stalled.value.reason == "LifecycleNotFound"
    assert stalled.value.message == (
        "spec.lifecycle.name: no Lifecycle 'mine' in namespace ns (Lifecycles here: other; built-in, as "
        "lifecycle.builtin: simple, service, testing_basic_lifecycle); the entity is checked again when it appears")
    assert stalled.value.facts["lifecycle"] == "mine"


def test_find_lifecycle_resolves_cluster_lifecycles_and_builtins_as_installed(world: World) -> None:
    from operators.lsm.world import Unresolved, find_lifecycle
    from operators.runtime.core.pipeline import StoredRecord
    from operators.runtime.core.store import object_key

    def find(ref: dict[str, str]) -> LifecycleSpec:
        return asyncio.run(find_lifecycle(world, NS, LifecycleRef.model_validate(ref)))

    assert find({"builtin": "testing_basic_lifecycle"}) == BUILTINS["testing_basic_lifecycle"]  # not installed
    with pytest.raises(Unresolved) as missing:
        find({"cluster": "tiny"})
    assert missing.value.reason == "LifecycleNotFound"
    assert missing.value.message.startswith("spec.lifecycle.cluster: no ClusterLifecycle 'tiny' (ClusterLifecycles: ")
    for name, spec in (("tiny", TINY), ("testing-basic-lifecycle", TINY)):  # cluster-wide: no namespace
        world.store.put(object_key("ClusterLifecycle", "", name), StoredRecord(f"u-{name}", 1, spec, {}))
    assert find({"cluster": "tiny"}) == LifecycleSpec.model_validate(TINY)
    assert find({"builtin": "testing_basic_lifecycle"}) == LifecycleSpec.model_validate(TINY)  # the object wins
    assert LifecycleRef.model_validate({"cluster": "tiny"}).key == "cluster:tiny"
    assert SERVICE_ENTITY_KIND.check_spec(greeter_entity({"cluster": "tiny", "builtin": "simple"}))


def test_an_entity_waits_for_a_blueprint_that_compiles_and_stalls_on_a_missing_one(world: World) -> None:
    entity = obj("ServiceEntity", "e", greeter_entity())
    with pytest.raises(PermanentError) as stalled:
        asyncio.run(resolve_entity(world.step(entity)))
    assert stalled.value.reason == "BlueprintNotFound"
    world.kube.add(custom_path("blueprints", NS, "greeter"), {"spec": greeter_blueprint(), "status": {
        "state": "Compiling", "conditions": [{"type": "Ready", "status": "False", "message": "compiling"}]}})
    with pytest.raises(TemporaryError) as waiting:
        asyncio.run(resolve_entity(world.step(entity)))
    assert waiting.value.waiting and waiting.value.reason == "BlueprintNotActive"


def test_an_entitys_config_and_realization_must_fit_its_lifecycle_and_blueprint(world: World) -> None:
    world.put("Lifecycle", "tiny", TINY)
    blueprint = greeter_blueprint()
    blueprint["variables"].append({"name": "size", "runtime": True, "mandatory": True})
    world.put("Blueprint", "greeter", blueprint, {"state": "Active"})
    entity = greeter_entity({"name": "tiny"}, config={"auto_design": False, "auto_nothing": False})
    entity["realization"]["inputs"].append({"variable": "colour", "attribute": "who"})
    entity["realization"]["outputs"][0]["deployment"] = "nope"
    with pytest.raises(PermanentError) as stalled:
        asyncio.run(resolve_entity(world.step(obj("ServiceEntity", "e", entity))))
    problems = stalled.value.message.split("; ")
    assert problems == [
        "spec.config.auto_nothing: the lifecycle has no auto transfer with configName auto_nothing (config names: "
        "auto_design)",
        "spec.realization.inputs[2].variable: colour is not a runtime variable of Blueprint greeter (runtime "
        "variables: region, size, who)",
        "spec.realization.inputs: Blueprint greeter needs its mandatory variable size (no default): map a required "
        "attribute to it",
        "spec.realization.outputs[0].deployment: Blueprint greeter has no deployment nope (deployments: tier)",
    ]
    # the same at apply time, where they are known
    with pytest.raises(Refusal) as refused:
        asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("CREATE", entity, name="e")))  # type: ignore[misc]
    assert refused.value.code == 422 and refused.value.message == stalled.value.message


def test_an_entity_referring_to_what_is_not_there_yet_is_admitted(world: World) -> None:
    assert SERVICE_ENTITY_KIND.admission is not None
    asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("CREATE", greeter_entity({"name": "later"}), name="e")))


def test_an_entitys_lifecycle_and_identity_do_not_change_under_its_instances(world: World) -> None:
    world.put("Blueprint", "greeter", greeter_blueprint(), {"state": "Active"})
    assert SERVICE_ENTITY_KIND.admission is not None
    old = {"spec": greeter_entity()}
    moved = greeter_entity({"builtin": "service"})
    asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", moved, old, name="greeter")))  # no instances
    world.kube.add(f"{INSTANCES}/db-1", body(instance(spec_of())))
    with pytest.raises(Refusal) as refused:
        asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", moved, old, name="greeter")))
    assert refused.value.code == 409
    assert refused.value.message == "spec.lifecycle: cannot change while the entity has instances (db-1)"
    described = {**greeter_entity(), "description": "still fine"}
    asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", described, old, name="greeter")))


def test_an_entity_is_checked_alone_at_apply_time() -> None:
    entity = greeter_entity()
    entity["identity"] = "who"
    entity["attributes"][0]["default"] = 5
    assert SERVICE_ENTITY_KIND.check_spec(entity) == [
        "spec.attributes[0].default: expected string, got int",
        "spec.identity: who has modifier rw+; an identity is rw (given at creation, never changed)"]
    both = {**greeter_entity(), "lifecycle": {"name": "x", "builtin": "simple"}}
    assert SERVICE_ENTITY_KIND.check_spec(both)[0].startswith("spec.lifecycle: Value error, exactly one of name")


def test_what_each_kind_is_checked_again_for() -> None:
    refers = SERVICE_ENTITY_KIND.depends_on
    assert refers["Lifecycle"]({"lifecycle": {"name": "tiny"}}, "tiny")
    assert not refers["Lifecycle"]({"lifecycle": {"builtin": "simple"}}, "simple")
    assert refers["Blueprint"]({"realization": {"blueprint": "greeter"}}, "greeter")
    assert not refers["Blueprint"]({}, "greeter")
