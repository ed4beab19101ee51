"""The Blueprint compiler on Calm's own examples: dependencies (inherent, explicit, implicit),
their lifting to call-runbook tasks, cycles, macro decisions, and the user-edited rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.calm.compiler import CompileResult, blueprint_state, compile_blueprint, lift
from operators.calm.models import BlueprintSpec, BlueprintStatus, CompiledAction
from operators.runtime.kube.crds import structural

ROOT = Path(__file__).resolve().parents[3]

# --- builders ------------------------------------------------------------------------------------


def run(name: str, script: str = "true", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": "exec", "script": script, **extra}


def setvar(name: str, *variables: str, script: str = "echo v=1") -> dict[str, Any]:
    return {"name": name, "type": "setvar", "variables": list(variables), "script": script}


def call(name: str, runbook: str | None = None, action: str | None = None, target: str | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"name": name, "type": "callRunbook"}
    for key, value in (("runbook", runbook), ("action", action), ("target", target)):
        if value is not None:
            task[key] = value
    return task


def service(name: str, depends_on: tuple[str, ...] = (), **actions: list[dict[str, Any]]) -> dict[str, Any]:
    """A service with an exec task in each system action unless given, e.g. create=[...]."""
    out: list[dict[str, Any]] = []
    for action in ("create", "start", "stop", "restart", "delete"):
        tasks = actions.pop(action, [run(action)])
        out.append({"name": action, "tasks": tasks})
    for action, tasks in actions.items():
        out.append({"name": action, "tasks": tasks})
    return {"name": name, "dependsOn": list(depends_on), "actions": out}


def blueprint(
    deployments: list[tuple[str, str, list[str], list[str]]],
    services: list[dict[str, Any]],
    *,
    substrates: list[dict[str, Any]] | None = None,
    packages: list[dict[str, Any]] | None = None,
    **rest: Any,
) -> dict[str, Any]:
    """deployments: (name, substrate, packages, services). Substrates default to Local ones."""
    subs = substrates if substrates is not None else [{"name": d[1], "type": "Local"} for d in deployments]
    return {
        "substrates": subs,
        "packages": packages or [],
        "services": services,
        "deployments": [{"name": n, "substrate": s, "packages": p, "services": v} for n, s, p, v in deployments],
        **rest,
    }


def compiled(spec: dict[str, Any], previous: Any = None) -> CompileResult:
    result = compile_blueprint(BlueprintSpec.model_validate(spec), previous)
    assert result.ok, result.errors
    return result


def action(result: CompileResult, name: str, owner: str | None = None) -> CompiledAction:
    return next(a for a in result.actions if a.name == name and a.owner == owner)


def edges(act: CompiledAction, parent: str | None = None) -> set[tuple[str, str]]:
    """The edges among the tasks with this parent (the top level by default)."""
    parents = {t.id: t.parent for t in act.tasks}
    return {(e.from_, e.to) for e in act.edges if parents.get(e.to) == parent}


def reasons(act: CompiledAction) -> dict[tuple[str, str], str]:
    return {(e.from_, e.to): e.reason for e in act.edges}


# --- Calm's example: S2 depends on S1, SUB10 and DEP4 --------------------------------------------

SEED_S2 = blueprint(
    [("D1", "SUB1", [], ["S1", "S2"]), ("D10", "SUB10", [], ["S10"]), ("DEP4", "SUB4", ["P4"], ["S4"])],
    [service("S1"), service("S2", ("S1", "SUB10", "DEP4")), service("S10"), service("S4")],
    substrates=[
        {"name": "SUB1", "type": "Local"},
        {"name": "SUB10", "type": "Local", "readiness": {"type": "exec", "script": "true"}},
        {"name": "SUB4", "type": "Local"},
    ],
    packages=[{"name": "P4", "install": {"tasks": [run("install")]}, "uninstall": {"tasks": [run("uninstall")]}}],
)


def test_s2_is_created_and_started_after_s1_sub10_and_dep4() -> None:
    result = compiled(SEED_S2)
    create = action(result, "create")
    assert {("S1", "S2"), ("SUB10", "S2"), ("S4", "S2"), ("P4", "S2")} <= edges(create)
    assert ("P4", "S4") in edges(create)  # inherent: a deployment's packages before its services
    assert reasons(create)[("S1", "S2")] == "explicit"
    assert reasons(create)[("P4", "S4")] == "inherent"
    # start: only services have a part; SUB10 has none, so no edge to it, and DEP4 means S4.
    assert edges(action(result, "start")) == {("S1", "S2"), ("S4", "S2")}


def test_s2_is_stopped_and_deleted_before_what_it_depends_on() -> None:
    result = compiled(SEED_S2)
    assert edges(action(result, "stop")) == {("S2", "S1"), ("S2", "S4")}
    delete = edges(action(result, "delete"))
    assert {("S2", "S1"), ("S2", "S4"), ("S2", "P4"), ("S4", "P4")} <= delete
    assert ("S1", "S2") not in delete


def test_the_dependency_list_shows_the_explicit_dependencies_with_their_kinds() -> None:
    result = compiled(SEED_S2)
    explicit = [(e.getter_resource_name, e.setter_resource_kind, e.setter_resource_name, e.source)
                for e in result.dependency_list if e.type == "explicit"]
    assert explicit == [
        ("S2", "Service", "S1", "spec.services[1].dependsOn[0]"),
        ("S2", "Substrate", "SUB10", "spec.services[1].dependsOn[1]"),
        ("S2", "Deployment", "DEP4", "spec.services[1].dependsOn[2]"),
    ]
    inherent = {(e.getter_resource_name, e.setter_resource_name) for e in result.dependency_list
                if e.type == "inherent"}
    assert {("P4", "SUB4"), ("S4", "P4"), ("S1", "SUB1")} <= inherent


def test_call_runbook_tasks_are_named_after_entities_and_flatten_their_runbooks() -> None:
    create = action(compiled(SEED_S2), "create")
    tasks = {t.id: t for t in create.tasks}
    assert tasks["S2"].type == "callRunbook" and tasks["S2"].calls == "Service/S2/create"
    assert tasks["S2/create"].parent == "S2" and tasks["S2/create"].target == "S2"
    assert tasks["S2/create"].source == "spec.services[1].actions[0].tasks[0]"
    assert tasks["SUB10/readiness"].source == "spec.substrates[1].readiness"
    assert create.system_generated and not create.user_edited


# --- implicit dependencies: T1 (getter) and T2 (setter) ------------------------------------------


def test_t1_getter_and_t2_setter_in_the_same_call_runbook_task() -> None:
    spec = blueprint([("D", "SUB", [], ["S1"])],
                     [service("S1", create=[run("T1", "echo @@{x}@@"), setvar("T2", "x")])])
    result = compiled(spec)
    create = action(result, "create")
    assert edges(create, parent="S1") == {("S1/T2", "S1/T1")}
    assert reasons(create)[("S1/T2", "S1/T1")] == "implicit"
    assert [t.runtime_macros for t in create.tasks if t.id == "S1/T1"] == [["@@{x}@@"]]
    # same entity: nothing between entities for the dependency list
    assert [e for e in result.dependency_list if e.type == "implicit"] == []


def test_t1_and_t2_in_different_call_runbook_tasks_order_those_and_are_promoted() -> None:
    spec = blueprint([("D", "SUB", [], ["S1", "S2"])],
                     [service("S1", create=[setvar("T2", "x")]), service("S2", create=[run("T1", "echo @@{S1.x}@@")])])
    result = compiled(spec)
    assert edges(action(result, "create")) == {("S1", "S2")}
    assert reasons(action(result, "create"))[("S1", "S2")] == "implicit"
    # promoted to the dependencies of every system action, reversed for stop and delete
    assert edges(action(result, "start")) == {("S1", "S2")}
    assert edges(action(result, "stop")) == {("S2", "S1")}
    assert edges(action(result, "delete")) == {("S2", "S1")}
    (entry,) = [e for e in result.dependency_list if e.type == "implicit"]
    assert entry.model_dump(exclude_none=True, by_alias=True) == {
        "type": "implicit",
        "getterResourceKind": "Service", "getterResourceName": "S2",
        "setterResourceKind": "Service", "setterResourceName": "S1", "setterResourceAttr": "x",
        "actionResourceKind": "Application", "actionName": "create",
        "getterTask": "S2/T1", "setterTask": "S1/T2", "source": "spec.services[1].actions[0].tasks[0].script",
    }


def test_the_edge_is_lifted_to_the_first_call_runbook_tasks_that_part_ways() -> None:
    """T1 and T2 in runbooks called by CT1 and CT2 of the same service: CT2 -> CT1 (as in Calm)."""
    spec = blueprint(
        [("D", "SUB", [], ["S1"])],
        [service("S1", create=[call("CT1", runbook="getter"), call("CT2", runbook="setter")])],
        runbooks=[{"name": "getter", "tasks": [run("T1", "echo @@{x}@@")]},
                  {"name": "setter", "tasks": [setvar("T2", "x")]}],
    )
    create = action(compiled(spec), "create")
    assert edges(create, parent="S1") == {("S1/CT2", "S1/CT1")}
    assert edges(create, parent="S1/CT1") == set()  # never between tasks across call-runbook tasks
    assert {t.id: t.target for t in create.tasks}["S1/CT1/T1"] == "S1"  # the callee inherits the target


def test_nested_tasks_of_different_services_order_the_services() -> None:
    spec = blueprint(
        [("D", "SUB", [], ["S1", "S2"])],
        [service("S1", create=[call("CT", runbook="setter")]), service("S2", create=[call("CT", runbook="getter")])],
        runbooks=[{"name": "getter", "tasks": [run("T1", "echo @@{S1.x}@@")]},
                  {"name": "setter", "tasks": [setvar("T2", "x")]}],
    )
    result = compiled(spec)
    assert edges(action(result, "create")) == {("S1", "S2")}
    (entry,) = [e for e in result.dependency_list if e.type == "implicit"]
    assert (entry.getter_task, entry.setter_task) == ("S2/CT/T1", "S1/CT/T2")


def test_an_implicit_dependency_of_start_holds_in_start_only() -> None:
    spec = blueprint([("D", "SUB", [], ["S1", "S2"])],
                     [service("S1", start=[setvar("T2", "y")]), service("S2", start=[run("T1", "echo @@{S1.y}@@")])])
    result = compiled(spec)
    assert edges(action(result, "start")) == {("S1", "S2")}
    assert edges(action(result, "create")) == set()
    assert edges(action(result, "stop")) == set()


def test_user_actions_get_no_dependency_edges_but_keep_set_macros_for_run_time() -> None:
    spec = blueprint(
        [("D", "SUB", [], ["S1", "S2"])],
        [service("S1"), service("S2", ("S1",))],
        actions=[{"name": "report", "tasks": [setvar("T2", "x", script="echo x=1"), run("T1", "echo @@{x}@@")]}],
    )
    result = compiled(spec)
    report = action(result, "report")
    assert report.edges == [] and not report.system and not report.system_generated and not report.user_edited
    (decision,) = [d for d in result.macros if d.action == "report"]
    assert decision.runtime and "T2" in decision.reason


def test_a_macro_nobody_sets_in_the_action_is_resolved_before_the_run() -> None:
    spec = blueprint(
        [("D", "SUB", [], ["S1", "S2"])],
        [service("S1", create=[setvar("T2", "x")]),
         {**service("S2", create=[run("T1", "echo @@{S1.x}@@ @@{port}@@")], start=[run("T3", "echo @@{S1.x}@@")]),
          "variables": [{"name": "port", "type": "int", "value": "80"}]}],
        credentials=[{"name": "cred", "type": "password", "username": "u",
                      "secret": {"secretRef": {"name": "s", "key": "k"}}}],
    )
    start_s1 = [run("T4", "echo @@{cred.username}@@ @@{cred.secret}@@ @@{calm_time}@@")]
    spec["services"][0]["actions"][1]["tasks"] = start_s1
    result = compiled(spec)
    decisions = {(d.action, d.task, d.macro): d for d in result.macros}
    assert decisions[("create", "S2/T1", "@@{S1.x}@@")].runtime
    assert decisions[("create", "S2/T1", "@@{S1.x}@@")].reads == ("Service S1.x",)
    assert not decisions[("create", "S2/T1", "@@{port}@@")].runtime
    assert not decisions[("start", "S2/T3", "@@{S1.x}@@")].runtime  # set in create, known before start
    assert not decisions[("start", "S1/T4", "@@{cred.username}@@")].runtime
    assert decisions[("start", "S1/T4", "@@{cred.secret}@@")].runtime  # secrets: only when the task runs
    assert decisions[("start", "S1/T4", "@@{calm_time}@@")].runtime
    assert decisions[("create", "S2/T1", "@@{port}@@")].position == len("echo @@{S1.x}@@ ")


def test_a_setvar_on_the_substrate_is_inherited_by_the_services_on_it() -> None:
    spec = blueprint(
        [("D", "vm", [], ["S1"])],
        [service("S1", create=[run("T1", "ping @@{ip}@@")])],
        substrates=[{"name": "vm", "type": "Kubernetes", "manifest": "kind: Pod",
                     "postCreate": {"tasks": [setvar("get_ip", "ip")]}}],
    )
    result = compiled(spec)
    create = action(result, "create")
    assert [t.id for t in create.tasks if t.parent == "vm"] == ["vm/apply", "vm/postCreate"]
    assert edges(create, parent="vm") == {("vm/apply", "vm/postCreate")}
    assert edges(create) == {("vm", "S1")}
    assert [e.setter_resource_attr for e in result.dependency_list if e.type == "implicit"] == ["ip"]
    assert [t.type for t in action(result, "delete").tasks if t.parent == "vm"] == ["kubernetes"]


# --- errors --------------------------------------------------------------------------------------


def errors_of(spec: dict[str, Any]) -> tuple[str, ...]:
    result = compile_blueprint(BlueprintSpec.model_validate(spec), None)
    assert not result.ok and result.actions == ()
    assert result.state_name(True) == "Error"
    return result.errors


def test_an_explicit_cycle_is_named() -> None:
    spec = blueprint([("D", "SUB", [], ["S1", "S2", "S3"])],
                     [service("S1", ("S2",)), service("S2", ("S1",)), service("S3")])
    assert errors_of(spec) == (
        "spec.services[0].dependsOn[0]: dependency cycle: S1 -> S2 -> S1 (S1 dependsOn S2; S2 dependsOn S1)",
    )


def test_a_longer_cycle_starts_at_its_first_entity_and_names_every_step() -> None:
    spec = blueprint([("D", "SUB", [], ["S1", "S2", "S3"])],
                     [service("S1", ("S3",)), service("S2", ("S1",)), service("S3", ("S2",))])
    (error,) = errors_of(spec)
    assert "dependency cycle: S1 -> S3 -> S2 -> S1 " in error


def test_a_cycle_through_a_deployment_is_named() -> None:
    spec = blueprint([("D1", "SUB1", [], ["S1"]), ("D2", "SUB2", [], ["S2"])],
                     [service("S1", ("D2",)), service("S2", ("S1",))])
    (error,) = errors_of(spec)
    assert "S1 -> D2 -> S2 -> S1" in error and "deployment D2 includes S2" in error


def test_an_implicit_cycle_is_named_with_the_macros() -> None:
    spec = blueprint(
        [("D", "SUB", [], ["S1", "S2"])],
        [service("S1", create=[setvar("set_x", "x"), run("get_y", "echo @@{S2.y}@@")]),
         service("S2", create=[setvar("set_y", "y"), run("get_x", "echo @@{S1.x}@@")])],
    )
    (error,) = errors_of(spec)
    assert "dependency cycle: S1 -> S2 -> S1" in error
    assert "S1 reads @@{S2.y}@@ that S2 sets in create" in error


def test_a_cycle_of_runbook_edges_is_named_in_its_runbook() -> None:
    spec = blueprint([("D", "SUB", [], ["S1"])], [service("S1", create=[run("T1"), run("T2")])])
    spec["services"][0]["actions"][0]["edges"] = [{"from": "T1", "to": "T2"}, {"from": "T2", "to": "T1"}]
    assert errors_of(spec) == (
        "spec.services[0].actions[0].edges[0]: cycle in action create: S1/T1 -> S1/T2 -> S1/T1 "
        "(edge T1 -> T2; edge T2 -> T1)",
    )


def test_an_explicit_edge_against_an_implicit_one_is_a_cycle() -> None:
    spec = blueprint([("D", "SUB", [], ["S1"])], [service("S1", create=[run("T1", "echo @@{x}@@"), setvar("T2", "x")])])
    spec["services"][0]["actions"][0]["edges"] = [{"from": "T1", "to": "T2"}]
    (error,) = errors_of(spec)
    assert "S1/T1 -> S1/T2 -> S1/T1" in error and "S1/T1 reads @@{x}@@ that S1/T2 sets in create" in error


def test_a_call_runbook_cycle_is_named() -> None:
    spec = blueprint([("D", "SUB", [], ["S1"])], [service("S1", create=[call("go", runbook="a")])],
                     runbooks=[{"name": "a", "tasks": [call("next", runbook="b")]},
                               {"name": "b", "tasks": [call("back", runbook="a")]}])
    assert errors_of(spec) == (
        "spec.runbooks[1].tasks[0]: callRunbook cycle: Runbook/a -> Runbook/b -> Runbook/a",
    )


def test_unknown_objects_and_attributes_name_task_macro_and_position() -> None:
    spec = blueprint([("D", "SUB", [], ["S1"])],
                     [service("S1", create=[run("T1", "echo @@{S9.x}@@ @@{S1.nope}@@")])])
    first, second = errors_of(spec)
    assert first.startswith('spec.services[0].actions[0].tasks[0].script: task "T1": macro @@{S9.x}@@ at position 8: '
                            "unknown object 'S9'")
    assert second.startswith('spec.services[0].actions[0].tasks[0].script: task "T1": macro @@{S1.nope}@@ '
                             "at position 19: unknown attribute 'nope'")


def test_spec_problems_are_compile_errors_too() -> None:
    spec = blueprint([("D", "SUB", [], ["S1", "S2", "S3"])],
                     [service("S1"), service("S2"), service("S3", ("S9",))])
    assert errors_of(spec) == ('spec.services[2].dependsOn[0]: no service "S9"',)


def test_an_edited_action_naming_an_entity_without_a_part_is_an_error() -> None:
    spec = blueprint([("D", "SUB", ["P"], ["S1"])], [service("S1")],
                     packages=[{"name": "P", "install": {"tasks": [run("i")]}}],
                     actions=[{"name": "start", "edges": [{"from": "P", "to": "S1"}]}])
    assert errors_of(spec) == ('spec.actions[0].edges[0].from: "P" has no part in action start (its tasks: S1)',)


# --- system-generated and user-edited actions ----------------------------------------------------

EDITED = blueprint(
    [("D", "SUB", [], ["S1", "S2", "S3"])],
    [service("S1"), service("S2", ("S1",)), service("S3")],
    actions=[{"name": "create", "tasks": [{"name": "pause", "type": "delay", "delaySeconds": 5}],
              "edges": [{"from": "S1", "to": "pause"}, {"from": "pause", "to": "S2"}, {"from": "S2", "to": "S3"}]}],
)


def flags(result: CompileResult) -> dict[str, tuple[bool, bool]]:
    return {a.name: (a.system_generated, a.user_edited) for a in result.actions if a.system}


def test_an_edited_create_is_user_edited_and_the_others_are_rebuilt_from_it() -> None:
    result = compiled(EDITED)
    assert flags(result) == dict.fromkeys(("create", "start", "stop", "restart", "delete"), (False, True))
    create = action(result, "create")
    assert edges(create) == {("S1", "pause"), ("pause", "S2"), ("S2", "S3")}
    assert {t.id for t in create.tasks if t.parent is None} == {"S1", "S2", "S3", "pause"}
    assert edges(action(result, "start")) == {("S1", "S2"), ("S2", "S3")}  # through the delay
    assert edges(action(result, "stop")) == {("S2", "S1"), ("S3", "S2")}
    assert not result.rebuilt and result.rebuilt_message is None


def test_a_user_edit_stays_while_the_dependency_list_is_unchanged() -> None:
    first = compiled(EDITED)
    changed = {**EDITED, "variables": [{"name": "v", "value": "1"}]}  # not a dependency change
    second = compiled(changed, first.state)
    assert flags(second)["create"] == (False, True) and not second.rebuilt


def test_a_dependency_change_throws_user_edits_away_and_says_so() -> None:
    first = compiled(EDITED)
    changed = {**EDITED, "services": [service("S1"), service("S2", ("S1",)), service("S3", ("S1",))]}
    second = compiled(changed, first.state)
    assert flags(second) == dict.fromkeys(("create", "start", "stop", "restart", "delete"), (True, False))
    assert second.rebuilt
    assert second.rebuilt_message is not None and "create" in second.rebuilt_message
    assert "spec.actions[0]" in second.rebuilt_message
    assert edges(action(second, "create")) == {("S1", "S2"), ("S1", "S3")}
    assert second.state is not None and second.state.edits[0].accepted is False
    # The edit is still in spec (Stead never writes spec): it stays ignored, without a new warning
    # Event, until the user edits it again.
    third = compiled(changed, second.state)
    assert flags(third)["create"] == (True, False) and not third.rebuilt
    assert any("spec.actions[0]: ignored" in w for w in third.warnings)
    re_edited = {**changed, "actions": [{**EDITED["actions"][0], "edges": [{"from": "S1", "to": "S3"}]}]}
    fourth = compiled(re_edited, third.state)
    assert flags(fourth)["create"] == (False, True)
    assert edges(action(fourth, "create")) == {("S1", "S3")}


def test_a_script_change_that_adds_an_implicit_dependency_also_rebuilds() -> None:
    first = compiled(EDITED)
    changed = {**EDITED, "services": [service("S1", create=[setvar("T2", "x")]), service("S2", ("S1",)),
                                      service("S3", create=[run("T1", "echo @@{S1.x}@@")])]}
    second = compiled(changed, first.state)
    assert second.rebuilt and flags(second)["create"] == (True, False)


def test_an_edit_of_stop_alone_leaves_the_other_actions_system_generated() -> None:
    spec = {**EDITED, "actions": [{"name": "stop", "edges": [{"from": "S1", "to": "S2"}]}]}
    result = compiled(spec)
    assert flags(result)["stop"] == (False, True)
    assert flags(result)["create"] == (True, False) and flags(result)["start"] == (True, False)


def test_an_edit_that_leaves_a_reader_before_its_setter_gets_a_warning() -> None:
    spec = blueprint([("D", "SUB", [], ["S1", "S2"])],
                     [service("S1", create=[setvar("T2", "x")]), service("S2", create=[run("T1", "echo @@{S1.x}@@")])],
                     actions=[{"name": "create", "edges": []}])
    result = compiled(spec)
    assert any("no edge orders S1 first" in w for w in result.warnings)


# --- the example, the status and the schema ------------------------------------------------------


def test_the_three_tier_example_compiles_with_an_implicit_dependency() -> None:
    document = yaml.safe_load((ROOT / "examples" / "blueprint-three-tier.yaml").read_text())
    result = compiled(document["spec"])
    implicit = {(e.getter_resource_name, e.setter_resource_name, e.setter_resource_attr)
                for e in result.dependency_list if e.type == "implicit"}
    assert ("App", "DB", "db_url") in implicit
    assert edges(action(result, "create")) >= {("DB", "App"), ("App", "Web")}
    assert edges(action(result, "stop")) == {("App", "DB"), ("Web", "App")}
    assert action(result, "scale-report").edges == []
    status = result.status(document["spec"].get("active"))
    assert status["state"] == "Active" and status["serviceCount"] == 3
    BlueprintStatus.model_validate(status)
    assert "three-tier-db" not in str(status)  # nothing of the secret, not even its reference


def test_states() -> None:
    assert blueprint_state(True, None) == "Compiled"
    assert blueprint_state(True, True) == "Active"
    assert blueprint_state(True, False) == "Inactive"
    assert blueprint_state(False, True) == "Error"


def test_status_has_every_field_so_a_merge_patch_clears_stale_ones() -> None:
    result = compile_blueprint(BlueprintSpec.model_validate(
        blueprint([("D", "SUB", [], ["S1"])], [service("S1", ("S9",))])), None)
    status = result.status(None)
    assert status["state"] == "Error" and status["actions"] == [] and status["compiledState"] is None
    assert status["errors"] == ['spec.services[0].dependsOn[0]: no service "S9"']


def test_lift() -> None:
    assert lift("S1/T1", "S1/T2") == ("S1", "S1/T2", "S1/T1")
    assert lift("S2/CT/T1", "S1/CT/T2") == (None, "S1", "S2")
    assert lift("S1/CT1/T1", "S1/CT2/T2") == ("S1", "S1/CT2", "S1/CT1")
    assert lift("S1/CT", "S1/CT/T2") is None


def _non_structural(node: Any, path: str = "") -> list[str]:
    bad: list[str] = []
    if isinstance(node, dict):
        for key in ("$ref", "anyOf", "oneOf", "allOf", "title", "default", "$defs"):
            if key in node:
                bad.append(f"{path}: {key}")
        if "type" not in node and "x-kubernetes-preserve-unknown-fields" not in node:
            bad.append(f"{path}: no type")
        for name, sub in (node.get("properties") or {}).items():
            bad.extend(_non_structural(sub, f"{path}.{name}"))
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                bad.extend(_non_structural(node[key], f"{path}[]"))
    return bad


@pytest.mark.parametrize("model", [BlueprintSpec, BlueprintStatus])
def test_the_models_give_structural_schemas_with_descriptions(model: Any) -> None:
    schema = structural(model)
    assert _non_structural(schema) == []
    assert all("description" in p for p in schema["properties"].values())


def test_explain_texts_reach_nested_fields() -> None:
    schema = structural(BlueprintSpec)
    task = schema["properties"]["services"]["items"]["properties"]["actions"]["items"]["properties"]["tasks"]["items"]
    assert "setvar" in task["properties"]["variables"]["description"]
    assert set(task["properties"]["type"]["enum"]) == {"exec", "setvar", "http", "delay", "callRunbook"}
    edge = schema["properties"]["runbooks"]["items"]["properties"]["edges"]["items"]
    assert set(edge["properties"]) == {"from", "to"}


def test_a_status_too_large_for_etcd_keeps_the_actions_without_their_tasks() -> None:
    result = compiled(SEED_S2)
    status = result.status(None, limit=2000)
    assert status["actionsTruncated"] is True
    create = next(a for a in status["actions"] if a["name"] == "create")
    assert create["tasks"] == [] and create["taskCount"] == len(action(result, "create").tasks) > 0
    assert "larger than 2000 bytes" in status["warnings"][-1]
    assert result.status(None)["actionsTruncated"] is None


# --- any dependency graph: a DAG that respects it, or a named cycle; never a crash ----------------


@st.composite
def random_blueprints(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 7))
    names = [f"S{i}" for i in range(count)]
    services = []
    for i, name in enumerate(names):
        depends = draw(st.lists(st.sampled_from(names), unique=True, max_size=3).map(
            lambda picked, me=name: tuple(n for n in picked if n != me)))
        reads = draw(st.lists(st.sampled_from(names), unique=True, max_size=2))
        create = [setvar("set", f"v{i}")] + [run(f"read_{other}", f"echo @@{{{other}.v{names.index(other)}}}@@")
                                              for other in reads if other != name]
        services.append(service(name, depends, create=create))
    split = draw(st.integers(0, count))
    deployments = [("D1", "SUB1", [], names[:split]), ("D2", "SUB2", [], names[split:])]
    return blueprint([d for d in deployments if d[3]], services)


@settings(max_examples=150, deadline=None)
@given(random_blueprints())
def test_any_dependency_graph_gives_a_dag_that_respects_it_or_a_named_cycle(spec: dict[str, Any]) -> None:
    result = compile_blueprint(BlueprintSpec.model_validate(spec), None)
    if not result.ok:
        assert all("cycle" in error for error in result.errors), result.errors
        return
    for act in result.actions:
        graph = nx.DiGraph((e.from_, e.to) for e in act.edges)
        assert nx.is_directed_acyclic_graph(graph)
    create = nx.DiGraph(edges(action(result, "create")))
    stop = nx.DiGraph(edges(action(result, "stop")))
    for svc in spec["services"]:
        for other in svc["dependsOn"]:
            assert nx.has_path(create, other, svc["name"])
            assert nx.has_path(stop, svc["name"], other)
