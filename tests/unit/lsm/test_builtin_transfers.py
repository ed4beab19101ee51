"""Every transfer of the built-in lifecycles, taken by the engine from its source state with its own
trigger: the success path and, where there is one, the error path."""

from __future__ import annotations

import pytest

from operators.lsm import BUILTINS, Auto, Delete, Outcome, ResourceOutcome, SetState, Update, advance
from operators.lsm.lifecycle import changes_nothing, triggers
from operators.lsm.machine import Trigger
from operators.lsm.models import BuiltinName, StateRequest, Transfer
from tests.unit.lsm.support import CLIENT, FULL, at, context, failing

OLD = {**FULL, "port": 5000}
CASES = [pytest.param(name, index, id=f"{name}[{index}]:{t.source}->{t.target}:{triggers(t)[0]}")
         for name, lifecycle in BUILTINS.items() for index, t in enumerate(lifecycle.transfers)]
ERROR_CASES = [pytest.param(name, index, id=f"{name}[{index}]:{t.source}->{t.error}:{triggers(t)[0]}")
               for name, lifecycle in BUILTINS.items() for index, t in enumerate(lifecycle.transfers)
               if t.error is not None]


def _trigger(transfer: Transfer, success: bool = True) -> Trigger:
    kind = triggers(transfer)[0]
    if kind == "auto":
        return Auto()
    if kind == "api_set_state":
        return SetState(transfer.target, current_version=5, message="asked")
    if kind == "on_update":
        return Update({**CLIENT, "port": 6000}, current_version=5)
    if kind == "on_delete":
        return Delete(current_version=5)
    return ResourceOutcome(success=success, message=None if success else "the create action failed")


def _fire(name: BuiltinName, index: int, *, fail: bool) -> tuple[Transfer, Outcome]:
    transfer = BUILTINS[name].transfers[index]
    ctx = context(name, check=failing("Blueprint variable port: 'x' is not one of 1, 2") if fail else None)
    status = at(transfer.source, lifecycle=name, candidate=FULL, active=FULL, rollback=OLD)
    return transfer, advance(ctx, status, _trigger(transfer, success=not fail))


@pytest.mark.parametrize(("name", "index"), CASES)
def test_the_transfer_leads_to_its_target(name: BuiltinName, index: int) -> None:
    transfer, outcome = _fire(name, index, fail=False)
    if changes_nothing(transfer, error_path=False) and not transfer.on_update:
        # a self-transfer without an operation is not executed: no version, no log, no write
        assert outcome.transfers == ()
        assert outcome.status.version == 5
        assert outcome.status.state == transfer.source
        if transfer.api_set_state:  # the request was taken in all the same: recorded, so it is handled once
            assert outcome.status.state_request == StateRequest(target=transfer.target, current_version=5,
                                                                message="asked")
        else:
            assert not outcome.changed
        return
    first = outcome.transfers[0]
    assert (first.from_, first.to, first.trigger, first.error) == (
        transfer.source, transfer.target, triggers(transfer)[0], False)
    assert first.version == 6
    assert first.operation == transfer.target_operation
    assert outcome.status.version == 5 + len(outcome.transfers)
    assert [e.version for e in outcome.transfers] == list(range(6, 6 + len(outcome.transfers)))
    assert outcome.status.log[-1] == outcome.transfers[-1]


@pytest.mark.parametrize(("name", "index"), ERROR_CASES)
def test_the_failing_transfer_leads_to_its_error_state(name: BuiltinName, index: int) -> None:
    transfer, outcome = _fire(name, index, fail=True)
    if changes_nothing(transfer, error_path=True):
        assert outcome.transfers == ()
        assert outcome.status.version == 5
        return
    first = outcome.transfers[0]
    assert (first.from_, first.to, first.error) == (transfer.source, transfer.error, True)
    assert first.operation == transfer.error_operation
    assert first.message is not None
    if transfer.validate_:
        assert "validation failed: Blueprint variable port: 'x' is not one of 1, 2" in first.message
        assert outcome.status.validation_problems == ["Blueprint variable port: 'x' is not one of 1, 2"]
    else:
        assert "the App failed: the create action failed" in first.message


def test_the_cases_cover_every_transfer() -> None:
    assert len(CASES) == 21 + 53 + 6
    assert len(ERROR_CASES) == sum(t.error is not None for lc in BUILTINS.values() for t in lc.transfers)
