"""Entity versions (issue 31, item 5): the per-version view of an entity, its checks, the migration of an
instance to another version (its sets validated under the new one, refused naming what fails), the pipeline
taking a migration in, and the webhooks refusing an unknown version, a migration that fails and the removal
of a version still in use."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from operators.lsm.machine import Refused
from operators.lsm.models import Migration, ServiceEntitySpec, ServiceInstanceStatus
from operators.lsm.versions import at_version, in_use, migrate, numbers, version_problems
from operators.runtime.core.kinds import Refusal
from operators.runtime.core.pipeline import Observed, PermanentError
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import (
    INSTANCES,
    World,
    body,
    greeter_entity,
    instance_spec,
    make_world,
    observed,
    run,
    up,
)
from tests.unit.lsm.support import CLIENT, ENTITY_SPEC, FULL, at, context

# --- the view of one version ----------------------------------------------------------------------

V2_SPEC: dict[str, Any] = {
    **ENTITY_SPEC,
    "attributes": [*ENTITY_SPEC["attributes"], {"name": "tier", "type": "string", "default": "gold"},
                   {"name": "replicas", "type": "int", "modifier": "rw+"}],
    "lifecycle": {"builtin": "service"},
    "version": 2,
    "versions": [{**ENTITY_SPEC, "version": 1}],
}
V2 = ServiceEntitySpec.model_validate(V2_SPEC)


def test_an_entity_without_versions_is_version_1_and_each_version_is_seen_whole() -> None:
    single = ServiceEntitySpec.model_validate(ENTITY_SPEC)
    assert numbers(single) == [1] and at_version(single, 1) == single and at_version(single, 2) is None
    assert numbers(V2) == [1, 2]
    old, new = at_version(V2, 1), at_version(V2, 2)
    assert old is not None and new is not None
    assert [a.name for a in old.attributes] == [a.name for a in single.attributes]
    assert old.lifecycle.key == "builtin:simple" and new.lifecycle.key == "builtin:service"
    assert old.current_version == 1 and old.versions == [] and new.versions == []


def test_other_versions_are_checked_naming_their_field() -> None:
    broken = {**V2_SPEC, "versions": [{**ENTITY_SPEC, "version": 1, "identity": "tags"}, {**ENTITY_SPEC, "version": 2}]}
    assert version_problems(ServiceEntitySpec.model_validate(broken)) == [
        "spec.versions[0].identity: tags has modifier rw+; an identity is rw (given at creation, never changed)",
        "spec.versions[0].identity: tags is of type list; an identity is a string or an int",
        "spec.versions[1].version: 2 is the current version (spec.version, 1 when absent); the top-level fields "
        "are that version",
    ]
    assert version_problems(V2) == []


def test_an_instance_object_uses_the_version_its_status_records() -> None:
    assert in_use({"status": {"state": "up", "entityVersion": 1}, "spec": {"entityVersion": 2}}, 3) == 1
    assert in_use({"spec": {"entityVersion": 2}}, 3) == 2  # not created yet: the one it will be created on
    assert in_use({"status": {"state": "up"}, "spec": {}}, 3) == 3  # created before entity versions


# --- the migration, pure --------------------------------------------------------------------------


def _to_v2(**given: Any) -> ServiceInstanceStatus:
    new = at_version(V2, 2)
    assert new is not None
    status = at("up", 4, active=FULL, rollback=FULL).model_copy(update={"entity_version": 1})
    return migrate(context("service", entity=new), status, 1, 2, Migration.model_validate(given)).status


def test_a_migration_validates_every_set_under_the_new_version_naming_what_fails() -> None:
    with pytest.raises(Refused) as refused:
        _to_v2(targetState="up")
    assert refused.value.code == 422 and refused.value.reason == "MigrationInvalid"
    assert refused.value.message == (
        "service instance db-1 cannot move to entity version 2: status.activeAttributes.replicas: required; "
        "status.rollbackAttributes.replicas: required (give values in spec.migration.attributes, take attributes "
        "out with spec.migration.remove)")
    with pytest.raises(Refused, match=r"status.activeAttributes.replicas: expected int, got string"):
        _to_v2(targetState="up", attributes={"replicas": "three"})
    with pytest.raises(Refused, match=r"spec.migration.attributes.nope: not an attribute of service entity"):
        _to_v2(targetState="up", attributes={"replicas": 3, "nope": 1})
    new = at_version(V2, 2)
    assert new is not None
    lean = context("service", entity=new.model_copy(update={"attributes": [a for a in new.attributes
                                                                           if a.name != "tags"]}))
    with pytest.raises(Refused, match=r"status.activeAttributes.tags: not an attribute of service entity"):
        migrate(lean, at("up", 4, active=FULL), 1, 2, Migration(target_state="up", attributes={"replicas": 1}))
    moved = migrate(lean, at("up", 4, active=FULL), 1, 2,
                    Migration(target_state="up", attributes={"replicas": 1}, remove=["tags"])).status
    assert moved.active_attributes == {**CLIENT, "tier": "gold", "replicas": 1}


def test_a_migration_moves_the_sets_and_lands_in_the_target_state_in_one_transfer() -> None:
    moved = _to_v2(targetState="up", attributes={"replicas": 3}, currentVersion=4, message="v2 adds tiers")
    assert moved.state == "up" and moved.version == 5 and moved.entity_version == 2
    assert moved.active_attributes == {**FULL, "tier": "gold", "replicas": 3}
    assert moved.rollback_attributes == {**FULL, "tier": "gold", "replicas": 3}
    assert moved.candidate_attributes is None
    last = moved.log[-1]
    assert (last.from_, last.to, last.trigger, last.version) == ("up", "up", "migrate", 5)
    assert last.message == "entity version 1 -> 2: v2 adds tiers"
    assert moved.ways_out is not None and any("update_start" in way for way in moved.ways_out)


def test_a_migration_names_a_state_of_the_new_lifecycle_at_the_current_version() -> None:
    with pytest.raises(Refused) as refused:
        _to_v2(targetState="nowhere", attributes={"replicas": 3})
    assert refused.value.code == 422 and refused.value.message.startswith(
        "spec.migration.targetState: 'nowhere' is not a state of its lifecycle in entity version 2 (states: start,")
    with pytest.raises(Refused, match="is a deleted state"):
        _to_v2(targetState="terminated", attributes={"replicas": 3})
    with pytest.raises(Refused) as stale:
        _to_v2(targetState="up", attributes={"replicas": 3}, currentVersion=3)
    assert stale.value.code == 409 and stale.value.reason == "StaleVersion"


# --- the pipeline and the webhooks ----------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> World:
    w = make_world(tmp_path, kube)
    w.catalog()
    return w


def greeter_v2(**extra: Any) -> dict[str, Any]:
    """The greeter of kindsupport as version 1, kept in `versions`, and a version 2 that adds a required `tier`
    (with a default) and, given in `extra`, more."""
    v1 = greeter_entity()
    v2 = greeter_entity(version=2, versions=[{**v1, "version": 1}])
    v2["attributes"] = [*v2["attributes"], {"name": "tier", "type": "string", "default": "gold"},
                        *extra.get("attributes", [])]
    return v2


def migrated(obj: Observed, version: int, **migration: Any) -> Observed:
    spec = {**obj.spec, "entityVersion": version, "migration": migration}
    return replace(obj, spec=spec, generation=obj.generation + 1)


def test_an_instance_records_its_version_and_stays_on_it_until_migrated(world: World) -> None:
    obj = up(world)
    assert obj.status["entityVersion"] == 1
    world.put("ServiceEntity", "greeter", greeter_v2())
    obj, outcome = run(world, obj)  # the entity's current version moved on: the instance did not
    assert outcome.error is None and obj.status["entityVersion"] == 1 and "tier" not in obj.status["activeAttributes"]
    obj, outcome = run(world, migrated(obj, 2, targetState="up", currentVersion=4))
    assert outcome.error is None
    assert (obj.status["state"], obj.status["version"], obj.status["entityVersion"]) == ("up", 5, 2)
    assert obj.status["activeAttributes"]["tier"] == "gold"
    assert obj.status["log"][-1]["trigger"] == "migrate"


def test_a_migration_the_new_version_refuses_is_recorded_and_stalls(world: World) -> None:
    obj = up(world)
    world.put("ServiceEntity", "greeter", greeter_v2(attributes=[{"name": "size", "type": "int"}]))
    obj, outcome = run(world, migrated(obj, 2, targetState="up"))
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "MigrationInvalid"
    assert "status.activeAttributes.size: required" in outcome.error.message
    assert obj.status["entityVersion"] == 1 and obj.status["state"] == "up" and obj.status["version"] == 4
    assert obj.status["refused"]["trigger"] == "migrate"
    obj, outcome = run(world, migrated(obj, 2, targetState="up", attributes={"size": 2}))
    assert outcome.error is None and obj.status["entityVersion"] == 2 and obj.status["activeAttributes"]["size"] == 2


def test_the_webhook_refuses_an_unknown_version_and_a_failing_migration(world: World) -> None:
    with pytest.raises(Refusal) as unknown:
        asyncio.run(world.admit("CREATE", {**instance_spec(), "entityVersion": 3}))
    assert unknown.value.code == 422
    assert unknown.value.message == "spec.entityVersion: service entity greeter has no version 3 (versions: 1)"
    obj = up(world)
    world.put("ServiceEntity", "greeter", greeter_v2(attributes=[{"name": "size", "type": "int"}]))
    old = body(obj)
    with pytest.raises(Refusal) as refused:
        asyncio.run(world.admit("UPDATE", migrated(obj, 2, targetState="up").spec, old))
    assert refused.value.code == 422 and "status.activeAttributes.size: required" in refused.value.message
    with pytest.raises(Refusal, match=r"spec\.migration: required"):
        asyncio.run(world.admit("UPDATE", {**obj.spec, "entityVersion": 2}, old))
    asyncio.run(world.admit("UPDATE", migrated(obj, 2, targetState="up", attributes={"size": 1}).spec, old))
    # a new instance is created on the current version, or the one it names
    asyncio.run(world.admit("CREATE", {**instance_spec("db-2"), "entityVersion": 1}, name="db-2"))


def test_a_version_still_in_use_cannot_be_removed_nor_its_lifecycle_changed(world: World) -> None:
    from operators.lsm.kinds import SERVICE_ENTITY_KIND

    assert SERVICE_ENTITY_KIND.admission is not None
    old = {"spec": greeter_v2()}
    only_v2 = {**greeter_v2(), "versions": []}
    asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", only_v2, old, name="greeter")))  # unused
    world.kube.add(f"{INSTANCES}/db-1", body(observed(instance_spec(), {"state": "up", "entityVersion": 1})))
    with pytest.raises(Refusal) as refused:
        asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", only_v2, old, name="greeter")))
    assert refused.value.code == 409 and refused.value.message == (
        "spec.versions: version 1 cannot be removed: instances use it (db-1); migrate them first "
        "(spec.entityVersion with spec.migration)")
    moved = greeter_v2()
    moved["versions"][0]["lifecycle"] = {"builtin": "service"}
    with pytest.raises(Refusal) as changed:
        asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", moved, old, name="greeter")))
    assert changed.value.message == "spec.versions[0].lifecycle: cannot change while instances use version 1 (db-1)"
    relabelled = {**greeter_v2(), "lifecycle": {"builtin": "service"}}  # version 2 has no instances: free
    asyncio.run(SERVICE_ENTITY_KIND.admission(world.request("UPDATE", relabelled, old, name="greeter")))


# --- stead service migrate ------------------------------------------------------------------------


def test_the_cli_sends_a_migration_read_by_the_new_versions_types(kube: FakeApi, capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    from tests.unit.lsm import test_service_cli as cli

    entity = {**cli.ENTITY, "spec": {**cli.ENTITY["spec"], "version": 2, "versions": [
        {**cli.ENTITY["spec"], "version": 1}]}}
    entity["spec"]["attributes"] = [*entity["spec"]["attributes"], {"name": "size", "type": "int"}]
    kube.add(cli.custom_path("serviceentities", cli.NS, "greeter"), entity)
    kube.add(cli.path("hello"), cli.instance("hello", "hello-id", entityVersion=1))
    assert cli.run(kube, "migrate", "hello", "2", "up", "-n", cli.NS, "--attr", "size=3", "--remove", "fast") == 0
    assert kube.received[-1].body == {"spec": {"entityVersion": 2, "migration": {
        "targetState": "up", "currentVersion": 4, "attributes": {"size": 3}, "remove": ["fast"]}}}
    assert ("serviceinstance/hello: migration to entity version 2 (state up) sent at version 4 (from entity "
            "version 1)") in capsys.readouterr().out
    # a second migration replaces the first whole: what it does not say any more is removed
    assert cli.run(kube, "migrate", "hello", "2", "up", "-n", cli.NS, "--attr", "who=x") == 0
    assert kube.objects[cli.path("hello")]["spec"]["migration"] == {"targetState": "up", "currentVersion": 4,
                                                                    "attributes": {"who": "x"}}


# --- the inventory API's route ---------------------------------------------------------------------


def test_the_api_route_checks_the_migration_then_writes_it_to_the_spec(kube: FakeApi) -> None:
    from tests.unit.lsm import test_inventory_api as api

    v1 = greeter_entity(realized=False)
    v2 = {**v1, "version": 2, "versions": [{**v1, "version": 1}],
          "attributes": [*v1["attributes"], {"name": "size", "type": "int"}]}
    kube.add(api.custom_path("serviceentities", api.NS, "greeter"), {"spec": v2})
    client = api.Client(kube)
    api.instance(kube, status={**api.UP, "entityVersion": 1})
    route = f"{api.INV}/db-1/update_entity_version"
    code, answer = client.call("POST", route, {"current_version": 4, "target_entity_version": 2, "state": "up"})
    assert code == 422 and answer["error"] == "MigrationInvalid"
    assert "status.activeAttributes.size: required" in answer["message"]
    assert "entityVersion" not in api.stored(kube)["spec"]  # refused before any write
    code, answer = client.call("POST", route, {"current_version": 4, "target_entity_version": 3, "state": "up"})
    assert code == 422 and answer["message"] == ("spec.entityVersion: service entity greeter has no version 3 "
                                                 "(versions: 1, 2)")
    code, answer = client.call("POST", route, {"current_version": 4, "target_entity_version": 2, "state": "up",
                                               "attributes": {"size": 2}, "message": "v2"})
    assert code == 200 and answer["service_entity_version"] == 1  # the operator moves it
    assert api.stored(kube)["spec"]["entityVersion"] == 2
    assert api.stored(kube)["spec"]["migration"] == {"targetState": "up", "currentVersion": 4,
                                                     "attributes": {"size": 2}, "message": "v2"}


def test_an_entity_is_checked_again_when_what_any_of_its_versions_refers_to_changes() -> None:
    from operators.lsm.kinds import SERVICE_ENTITY_KIND

    spec = greeter_v2()
    spec["versions"][0]["lifecycle"] = {"name": "old-gated"}
    spec["versions"][0]["realization"]["blueprint"] = "old-greeter"
    assert SERVICE_ENTITY_KIND.depends_on["Lifecycle"](spec, "old-gated")
    assert SERVICE_ENTITY_KIND.depends_on["Blueprint"](spec, "old-greeter")
    assert SERVICE_ENTITY_KIND.depends_on["Blueprint"](spec, "greeter")
    assert not SERVICE_ENTITY_KIND.depends_on["Blueprint"](spec, "other")
