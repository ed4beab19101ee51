"""Lifecycle validation (each refusal names its field), the built-ins, and the derived model states."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.lsm import BUILTINS, config_problems, lifecycle_problems, model_states, resource_intent
from operators.lsm.lifecycle import summarize
from operators.lsm.models import LifecycleSpec, State

GOOD: dict[str, Any] = {
    "initialState": "start",
    "states": [
        {"name": "start", "validateSelf": "candidate"},
        {"name": "up", "exportResources": True, "validateSelf": "active", "validateOthers": "active"},
        {"name": "rejected", "label": "danger"},
        {"name": "deleting", "exportResources": True, "purgeResources": True},
        {"name": "gone", "deleted": True},
    ],
    "transfers": [
        {"source": "start", "target": "up", "error": "rejected", "auto": True, "validate": True,
         "targetOperation": "promote"},
        {"source": "rejected", "target": "start", "onUpdate": True},
        {"source": "rejected", "target": "gone", "onDelete": True},
        {"source": "up", "target": "deleting", "onDelete": True},
        {"source": "deleting", "target": "gone", "error": "deleting", "resourceBased": True},
    ],
}


def _with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    spec.update(changes)
    return spec


def _transfer(index: int, **changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    spec["transfers"][index].update(changes)
    return spec


def _more(*transfers: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    spec["transfers"].extend(transfers)
    return spec


def test_a_good_lifecycle_and_the_builtins_have_no_problems() -> None:
    assert lifecycle_problems(GOOD) == []
    for lifecycle in BUILTINS.values():
        assert lifecycle_problems(lifecycle.model_dump(by_alias=True, exclude_none=True)) == []


def test_the_builtins_have_the_shape_of_inmantas() -> None:
    assert {name: (len(lc.states), len(lc.transfers)) for name, lc in BUILTINS.items()} == {
        "simple": (14, 21), "service": (20, 53), "testing_basic_lifecycle": (7, 6)}
    assert all(lc.initial_state == "start" for lc in BUILTINS.values())
    configs = {t.config_name for t in BUILTINS["service"].transfers if t.config_name}
    assert configs == {"auto_designed", "auto_creating", "auto_update_designed", "auto_update_inprogress"}


def test_model_states_are_derived_from_the_flags() -> None:
    simple = model_states(BUILTINS["simple"])
    assert [s for s, m in simple.items() if m == "candidate"] == ["start", "acknowledged", "rejected"]
    assert [s for s, m in simple.items() if m == "inactive"] == ["terminated"]
    assert simple["up"] == simple["update_rejected"] == simple["deleting"] == "active"
    service = model_states(BUILTINS["service"])
    assert [s for s, m in service.items() if m == "designed"] == ["designed"]
    assert model_states(BUILTINS["testing_basic_lifecycle"])["rejected"] == "inactive"  # a deleted state
    assert model_states(LifecycleSpec.model_validate(GOOD)) == {
        "start": "candidate", "up": "active", "rejected": "inactive", "deleting": "active", "gone": "inactive"}


def test_the_summary_is_the_status() -> None:
    facts = summarize(LifecycleSpec.model_validate(GOOD))
    assert (facts["stateCount"], facts["transferCount"], facts["modelStates"]["up"]) == (5, 5, "active")


def test_what_an_app_should_be_in_each_state() -> None:
    intents = {s.name: resource_intent(s) for s in BUILTINS["simple"].states}
    assert intents["deleting"] == "purge"
    assert intents["up"] == intents["update_rejected"] == intents["rollback"] == "deploy"
    assert intents["start"] == intents["rejected"] == intents["terminated"] == "none"
    assert resource_intent(State(name="x", purge_resources=True)) == "purge"


# --- refusals, each naming its field -------------------------------------------------------------


def test_no_initial_state() -> None:
    spec = _with()
    del spec["initialState"]
    assert lifecycle_problems(spec) == ["spec.initialState: Field required"]
    assert lifecycle_problems(_with(initialState="begin")) == [
        'spec.initialState: "begin" is not a state of the lifecycle (states: start, up, rejected, deleting, gone)']
    assert lifecycle_problems(_with(initialState="gone")) == [
        'spec.initialState: "gone" is a deleted state: an instance would be gone as soon as it is created']


def test_a_transfer_naming_an_unknown_state() -> None:
    problems = lifecycle_problems(_transfer(0, target="upp", error="rejectd"))
    assert problems[:2] == [
        'spec.transfers[0].target: unknown state "upp" (states: start, up, rejected, deleting, gone)',
        'spec.transfers[0].error: unknown state "rejectd" (states: start, up, rejected, deleting, gone)',
    ]
    assert lifecycle_problems(_transfer(1, source="nowhere"))[0].startswith(
        'spec.transfers[1].source: unknown state "nowhere"')


@pytest.mark.parametrize("field", ["targetOperation", "errorOperation"])
def test_an_operation_outside_the_five(field: str) -> None:
    problems = lifecycle_problems(_transfer(0, **{field: "clear everything"}))
    assert problems == [f"spec.transfers[0].{field}: Input should be 'clear candidate', 'clear active', "
                        "'clear rollback', 'promote' or 'rollback'"]


def test_duplicate_states() -> None:
    spec = _with()
    spec["states"].append({"name": "up"})
    assert lifecycle_problems(spec) == ['spec.states[5].name: duplicate state "up" (first at spec.states[1])']


def test_a_deleted_state_without_a_way_in() -> None:
    spec = _with()
    spec["states"].append({"name": "vanished", "deleted": True})
    assert lifecycle_problems(spec) == [
        'spec.states[5].deleted: "vanished" is a deleted state that no transfer leads to: no instance can ever '
        "reach it"]


def test_a_deleted_state_is_terminal() -> None:
    problems = lifecycle_problems(_more({"source": "gone", "target": "start", "apiSetState": True}))
    assert problems == ['spec.transfers[5].source: "gone" is a deleted state (terminal): no transfer may leave it']


def test_a_state_with_no_way_out() -> None:
    spec = _more({"source": "up", "target": "stuck", "apiSetState": True})
    spec["states"].append({"name": "stuck", "exportResources": True})
    assert lifecycle_problems(spec) == [
        'spec.states[5]: "stuck" has no way out: no transfer leaves it and it is not deleted, so an instance '
        "arriving there would stay for good"]


def test_a_transfer_without_a_trigger() -> None:
    assert lifecycle_problems(_transfer(1, onUpdate=False)) == [
        "spec.transfers[1]: no trigger: set one of auto, apiSetState, onUpdate, onDelete, resourceBased"]


def test_failures_need_somewhere_to_go_and_only_failing_transfers_have_one() -> None:
    assert lifecycle_problems(_transfer(0, error=None)) == [
        "spec.transfers[0].error: required: a validating transfer needs a state to go to when it fails"]
    assert lifecycle_problems(_transfer(4, error=None)) == [
        "spec.transfers[4].error: required: a resource-based transfer needs a state to go to when it fails"]
    assert lifecycle_problems(_transfer(3, error="rejected")) == [
        "spec.transfers[3].error: only a validating or resource-based transfer can fail; this one would never take "
        "its error path"]
    assert lifecycle_problems(_transfer(3, errorOperation="clear candidate")) == [
        "spec.transfers[3].errorOperation: the transfer has no error state to apply it on the way to"]


def test_only_an_auto_transfer_has_a_config_name() -> None:
    assert lifecycle_problems(_transfer(3, configName="auto_delete")) == [
        "spec.transfers[3].configName: only an auto transfer can be switched off"]
    assert lifecycle_problems(_transfer(0, configName="auto_up")) == []


@pytest.mark.parametrize(("extra", "trigger"), [
    ({"source": "start", "target": "rejected", "auto": True}, "auto"),
    ({"source": "rejected", "target": "up", "onUpdate": True}, "on_update"),
    ({"source": "up", "target": "gone", "onDelete": True}, "on_delete"),
    ({"source": "deleting", "target": "up", "error": "deleting", "resourceBased": True}, "resource_based"),
])
def test_two_transfers_one_trigger_could_take(extra: dict[str, Any], trigger: str) -> None:
    problems = lifecycle_problems(_more(extra))
    assert problems[0].startswith(f'spec.transfers[5]: a second {trigger} transfer from "{extra["source"]}" '
                                  "(first at spec.transfers[")
    assert problems[0].endswith("): which one an instance takes would be arbitrary")


def test_state_requests_only_clash_on_the_same_target() -> None:
    assert lifecycle_problems(_more({"source": "up", "target": "start", "apiSetState": True},
                                    {"source": "up", "target": "rejected", "apiSetState": True})) == []
    problems = lifecycle_problems(_more({"source": "up", "target": "start", "apiSetState": True},
                                        {"source": "up", "target": "start", "apiSetState": True,
                                         "targetOperation": "clear active"}))
    assert problems == ['spec.transfers[6]: a second api_set_state transfer from "up" to "start" (first at '
                        "spec.transfers[5]): which one an instance takes would be arbitrary"]


def test_auto_transfers_that_never_settle() -> None:
    spec = _more({"source": "up", "target": "rejected", "auto": True},
                 {"source": "rejected", "target": "start", "auto": True})
    assert lifecycle_problems(spec) == [
        "spec.transfers: auto transfers form a cycle start -> up -> rejected -> start (spec.transfers[0], "
        "spec.transfers[5], spec.transfers[6]): an instance would never settle"]


def test_a_validating_auto_transfer_closes_a_cycle_through_its_error_path() -> None:
    spec = _more({"source": "rejected", "target": "start", "auto": True})
    assert lifecycle_problems(spec) == [
        "spec.transfers: auto transfers form a cycle start -> rejected -> start (spec.transfers[0], "
        "spec.transfers[5]): an instance would never settle"]


def test_an_auto_self_transfer_loops_only_when_it_changes_something() -> None:
    idle = _more({"source": "up", "target": "up", "auto": True})
    assert lifecycle_problems(idle) == []  # not executed: no loop
    busy = _more({"source": "up", "target": "up", "auto": True, "targetOperation": "clear rollback"})
    assert lifecycle_problems(busy) == [
        "spec.transfers: auto transfers form a cycle up -> up (spec.transfers[5]): an instance would never settle"]


def test_an_entity_config_naming_no_auto_transfer() -> None:
    service = BUILTINS["service"]
    assert config_problems({"auto_designed": False, "auto_creating": True}, service) == []
    assert config_problems({"auto_desinged": False}, service) == [
        "spec.config.auto_desinged: the lifecycle has no auto transfer with configName auto_desinged (config names: "
        "auto_creating, auto_designed, auto_update_designed, auto_update_inprogress)"]
    assert config_problems({"x": True}, BUILTINS["simple"])[0].endswith("(config names: none)")
