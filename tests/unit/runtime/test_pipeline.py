"""The pipeline engine: plan, run, status composition and the smallest status patch."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from operators.runtime.core import conditions as cond
from operators.runtime.core import pipeline as engine
from operators.runtime.core.pipeline import (
    Observed,
    PermanentError,
    Pipeline,
    Restore,
    Run,
    Skip,
    StepContext,
    StoredRecord,
    TemporaryError,
)

NOW = "2026-11-21T10:00:00Z"
LATER = "2026-11-21T10:05:00Z"


async def _ok(ctx: StepContext) -> Mapping[str, Any]:
    return {"seen": sorted(ctx.facts)}


def _pipe(**steps: Any) -> Pipeline:
    defaults = {"Init": _ok, "Validated": _ok}
    defaults.update(steps)
    return Pipeline(phases=("Init", "Validated", "Provisioned"), steps=defaults)


def _obj(generation: int = 1, status: Mapping[str, Any] | None = None, uid: str = "u1") -> Observed:
    return Observed("Environment", "ns", "e1", uid, generation, {}, {"release": "r"}, dict(status or {}))


def _provisioned(generation: int = 1) -> dict[str, Any]:
    return engine.compose_status(_obj(generation), engine.Outcome("Provisioned", {}), NOW)


def test_pipeline_must_run_from_init_to_provisioned() -> None:
    with pytest.raises(ValueError, match="from Init to Provisioned"):
        Pipeline(phases=("Start", "Provisioned"), steps={"Start": _ok})
    with pytest.raises(ValueError, match="without a step"):
        Pipeline(phases=("Init", "Validated", "Provisioned"), steps={"Init": _ok})


def test_plan_new_object_runs_from_init() -> None:
    assert engine.plan(_pipe(), _obj(), None) == Run("Init")


def test_plan_skips_what_the_store_holds_at_this_generation() -> None:
    stored = StoredRecord("u1", 1, {}, _provisioned())
    assert isinstance(engine.plan(_pipe(), _obj(status=_provisioned()), stored), Skip)


def test_plan_restores_status_lost_while_the_store_has_it() -> None:
    stored = StoredRecord("u1", 1, {}, _provisioned())
    decision = engine.plan(_pipe(), _obj(status={}), stored)
    assert decision == Restore(stored.status)


def test_plan_adopts_a_provisioned_object_the_store_has_no_record_of() -> None:
    """A lost store (or another replica's object): the status is the truth, nothing runs again."""
    assert engine.plan(_pipe(), _obj(status=_provisioned()), None) == engine.Adopt()
    assert engine.plan(_pipe(), _obj(generation=2, status=_provisioned(1)), None) == Run("Init")  # a new spec


def test_plan_ignores_a_record_of_another_incarnation() -> None:
    stored = StoredRecord("old-uid", 1, {}, _provisioned())
    assert engine.plan(_pipe(), _obj(status={}), stored) == Run("Init")


def test_plan_spec_change_restarts_from_the_update_phase() -> None:
    pipe = Pipeline(phases=("Init", "Validated", "Provisioned"), steps={"Init": _ok, "Validated": _ok},
                    update_phase="Validated")
    stored = StoredRecord("u1", 1, {}, _provisioned(1))
    assert engine.plan(pipe, _obj(generation=2, status=_provisioned(1)), stored) == Run("Validated")


def test_plan_waits_on_a_stalled_object_until_its_spec_changes() -> None:
    stalled = engine.compose_status(_obj(), engine.Outcome("Init", {}, PermanentError("Bad", "no")), NOW)
    assert isinstance(engine.plan(_pipe(), _obj(status=stalled), None), Skip)
    assert engine.plan(_pipe(), _obj(generation=2, status=stalled), None) == Run("Init")


def test_plan_resumes_an_announced_phase() -> None:
    status = {"phase": "Validated", "observedGeneration": 1}
    assert engine.plan(_pipe(), _obj(status=status), None) == Run("Validated")


def test_run_passes_facts_along_and_reaches_provisioned() -> None:
    async def first(ctx: StepContext) -> Mapping[str, Any]:
        return {"a": 1}

    outcome = asyncio.run(engine.run(_pipe(Init=first), _obj(), "Init"))
    assert outcome.phase == "Provisioned" and outcome.error is None
    assert outcome.facts == {"a": 1, "seen": ["a"]}


@pytest.mark.parametrize("error", [PermanentError("Invalid", "bad"), TemporaryError("Later", "wait")])
def test_run_stops_at_the_failing_phase(error: Exception) -> None:
    async def failing(ctx: StepContext) -> Mapping[str, Any]:
        raise error

    outcome = asyncio.run(engine.run(_pipe(Validated=failing), _obj(), "Init"))
    assert outcome.phase == "Validated" and outcome.error is error


def test_unexpected_exceptions_become_temporary() -> None:
    async def buggy(ctx: StepContext) -> Mapping[str, Any]:
        raise KeyError("x")

    outcome = asyncio.run(engine.run(_pipe(Init=buggy), _obj(), "Init"))
    assert isinstance(outcome.error, TemporaryError) and "KeyError" in outcome.error.message


def test_announced_phases_are_entered_before_their_step() -> None:
    entered: list[str] = []

    async def on_enter(phase: str, facts: Mapping[str, Any]) -> None:
        entered.append(phase)

    pipe = Pipeline(phases=("Init", "Validated", "Provisioned"), steps={"Init": _ok, "Validated": _ok},
                    announce=frozenset({"Validated"}))
    asyncio.run(engine.run(pipe, _obj(), "Init", on_enter))
    assert entered == ["Validated"]


def test_compose_status_sets_the_three_conditions() -> None:
    ok = _provisioned()
    assert ok["phase"] == "Provisioned" and ok["observedGeneration"] == 1
    assert cond.is_true(ok["conditions"], "Ready")
    assert not cond.is_true(ok["conditions"], "Stalled")
    stalled = engine.compose_status(_obj(), engine.Outcome("Init", {}, PermanentError("InvalidSpec", "x")), NOW)
    assert cond.find(stalled["conditions"], "Stalled") == {
        "type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "x",
        "lastTransitionTime": NOW, "observedGeneration": 1,
    }
    retrying = engine.compose_status(_obj(), engine.Outcome("Init", {}, TemporaryError("Later", "y")), NOW)
    assert cond.is_true(retrying["conditions"], "Reconciling") and retrying["phase"] == "Init"


def test_a_permanent_error_may_name_the_failure_it_is_as_the_phase_but_never_provisioned() -> None:
    failed = engine.compose_status(_obj(), engine.Outcome("Validated", {}, PermanentError("Bad", "x", phase="Failed")),
                                   NOW)
    assert failed["phase"] == "Failed" and not cond.is_true(failed["conditions"], "Ready")
    assert isinstance(engine.plan(_pipe(), _obj(status=failed), None), Skip)  # stalled: waits for a spec change
    assert engine.plan(_pipe(), _obj(generation=2, status=failed), None) == Run("Init")
    with pytest.raises(ValueError, match="cannot be Provisioned"):
        PermanentError("Bad", "x", phase="Provisioned")


def test_unchanged_conditions_keep_their_transition_time() -> None:
    first = _provisioned()
    again = engine.compose_status(_obj(status=first), engine.Outcome("Provisioned", {}), LATER)
    assert again == first
    assert engine.status_patch(first, again) is None


def test_status_patch_sends_only_changes_and_nulls_removed_keys() -> None:
    old = {"phase": "Init", "errors": ["x"], "nodeCount": 1}
    new = {"phase": "Provisioned", "nodeCount": 1}
    assert engine.status_patch(old, new) == {"phase": "Provisioned", "errors": None}


def test_a_failing_step_can_still_record_facts() -> None:
    async def failing(ctx: StepContext) -> Mapping[str, Any]:
        raise PermanentError("CycleFound", "S1 -> S2 -> S1", facts={"state": "Error", "errors": ["S1 -> S2 -> S1"]})

    outcome = asyncio.run(engine.run(_pipe(Validated=failing), _obj(), "Init"))
    status = engine.compose_status(_obj(), outcome, NOW)
    assert status["state"] == "Error" and status["errors"] == ["S1 -> S2 -> S1"]
    assert status["seen"] == [] and cond.is_true(status["conditions"], "Stalled")
