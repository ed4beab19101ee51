"""The state machine engine: the seed's walks through `simple` with the attribute sets checked at
each step, the version rules, every refusal with its message, auto chains and config switches."""

from __future__ import annotations

from typing import Any

import pytest

from operators.lsm import (
    Auto,
    Create,
    Delete,
    LifecycleError,
    Outcome,
    Refused,
    ResourceOutcome,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
    SetState,
    Update,
    advance,
    pending_request,
)
from operators.lsm.machine import AUTO_LIMIT, LOG_LIMIT, Context
from operators.lsm.models import LifecycleSpec, LogEntry, Operation, StateRequest
from tests.unit.lsm.support import CLIENT, FULL, at, context, create, failing, steps

OLD = {**FULL, "port": 5000}


def _refusal(ctx: Context, status: ServiceInstanceStatus, trigger: Any) -> Refused:
    with pytest.raises(Refused) as caught:
        advance(ctx, status, trigger)
    return caught.value


def _up(ctx: Context | None = None) -> ServiceInstanceStatus:
    """An instance of `simple` created and deployed: in up, at version 4."""
    ctx = ctx or context()
    status = create(ctx).status
    return advance(ctx, status, ResourceOutcome(success=True)).status


# --- creation ------------------------------------------------------------------------------------


def test_creation_validates_promotes_and_waits_for_the_deployment() -> None:
    out = create(context())
    assert steps(out) == [(None, "start", "create"), ("start", "acknowledged", "auto"),
                          ("acknowledged", "creating", "auto")]
    assert [e.version for e in out.transfers] == [1, 2, 3]
    assert out.transfers[2].operation == "promote"
    status = out.status
    assert (status.state, status.version, status.model_state, status.identity) == ("creating", 3, "active", "db-1")
    assert status.candidate_attributes is None
    assert status.active_attributes == FULL  # the default of `tags` filled in
    assert status.rollback_attributes is None  # promote moved the (absent) active set there
    assert status.client_attributes == CLIENT
    assert status.ways_out == ["App succeeds -> up, fails -> failed", "delete -> deleting"]
    assert status.log[0] == LogEntry(from_=None, to="start", trigger="create", version=1,
                                     time="2025-01-02T03:04:05Z", message="created")


def test_a_creation_that_fails_validation_is_rejected_with_the_reasons_and_fixed_by_an_update() -> None:
    ctx = context()
    out = create(ctx, {**CLIENT, "port": "5432", "size": None})
    assert steps(out)[-1] == ("start", "rejected", "auto")
    status = out.status
    assert (status.state, status.version, status.model_state) == ("rejected", 2, "candidate")
    assert status.validation_problems == ["spec.attributes.port: expected int, got string"]
    assert out.transfers[-1].error is True
    assert "validation failed: spec.attributes.port: expected int, got string" in str(out.transfers[-1].message)
    assert status.candidate_attributes == {**CLIENT, "port": "5432", "size": None, "tags": ["db"]}
    assert status.active_attributes is None
    assert status.ways_out == ["update -> start", "delete -> terminated"]

    fixed = advance(ctx, status, Update({**CLIENT, "port": 5433}, current_version=2))
    assert steps(fixed) == [("rejected", "start", "on_update"), ("start", "acknowledged", "auto"),
                            ("acknowledged", "creating", "auto")]
    assert fixed.status.validation_problems is None
    assert fixed.status.active_attributes == {**FULL, "port": 5433}  # size removed by the client
    assert fixed.status.version == 5


def test_a_rejected_instance_is_deleted_at_once() -> None:
    ctx = context()
    rejected = create(ctx, {**CLIENT, "port": "x"}).status
    out = advance(ctx, rejected, Delete())
    assert steps(out) == [("rejected", "terminated", "on_delete")]
    assert (out.status.deleted, out.status.model_state, out.status.ways_out) == (True, "inactive", [])


def test_creation_refuses_read_only_and_unknown_attributes_and_a_missing_identity() -> None:
    ctx = context()
    refused = _refusal(ctx, ServiceInstanceStatus(), Create({"region": "eu", "port": 1, "address": "10.0.0.1",
                                                             "colour": "red"}))
    assert (refused.code, refused.reason) == (422, "ReadOnlyAttribute")
    assert refused.message == (
        "spec.attributes.address: read-only (modifier r): Stead sets it from the deployment, a client never does; "
        "spec.attributes.colour: not an attribute of service entity database (attributes: name, region, port, "
        "size, tags, address); spec.attributes.name: required: it is the service identity"
    )


def test_the_identity_is_unique_per_entity() -> None:
    refused = _refusal(context(others={"db-1": "db-other"}), ServiceInstanceStatus(), Create(CLIENT))
    assert (refused.code, refused.reason) == (409, "DuplicateIdentity")
    assert refused.message == "spec.attributes.name: service identity name=db-1 is already used by service instance " \
                              "db-other"
    # the instance itself, listed among the entity's instances, is no conflict
    assert create(context(others={"db-1": "db-1"})).status.state == "creating"


def test_a_duplicate_identity_found_by_validation_rejects() -> None:
    """The identity is checked again when validating (an instance created while the webhook was off)."""
    status = at("start", 1, candidate=FULL)
    out = advance(context(others={"db-1": "db-0"}), status, Auto())
    assert out.status.state == "rejected"
    assert out.status.validation_problems == [
        "spec.attributes.name: service identity name=db-1 is already used by service instance db-0"]


def test_a_second_create_of_the_same_instance_changes_nothing() -> None:
    ctx = context()
    status = create(ctx).status
    assert advance(ctx, status, Create(CLIENT)) == Outcome(status, (), False)


# --- deployment, update, rollback, delete --------------------------------------------------------


def test_deployed_then_repaired_without_a_transfer_then_failed_and_recovered() -> None:
    ctx = context()
    up = _up(ctx)
    assert (up.state, up.version, up.model_state) == ("up", 4, "active")
    repair = advance(ctx, up, ResourceOutcome(success=True))
    assert repair == Outcome(up, (), False)  # up -> up with no operation is not executed
    failed = advance(ctx, up, ResourceOutcome(success=False, message="task install failed")).status
    assert (failed.state, failed.version) == ("failed", 5)
    assert failed.log[-1].message == "repair: deployment checked; the App failed: task install failed"
    assert advance(ctx, failed, ResourceOutcome(success=False)).transfers == ()  # failed -> failed: not executed
    recovered = advance(ctx, failed, ResourceOutcome(success=True)).status
    assert (recovered.state, recovered.version) == ("up", 6)


def test_an_update_is_validated_promoted_and_deployed_keeping_the_old_values_for_rollback() -> None:
    ctx = context()
    up = _up(ctx)
    out = advance(ctx, up, Update({**CLIENT, "port": 6000}, current_version=4))
    assert steps(out) == [("up", "update_start", "on_update"), ("update_start", "update_acknowledged", "auto"),
                          ("update_acknowledged", "update_inprogress", "auto")]
    status = out.status
    assert (status.version, status.candidate_attributes) == (7, None)
    assert status.active_attributes == {**FULL, "port": 6000}
    assert status.rollback_attributes == FULL
    done = advance(ctx, status, ResourceOutcome(success=True)).status
    assert (done.state, done.version, done.rollback_attributes) == ("up", 8, FULL)


def test_an_update_that_fails_validation_is_rejected_then_aborted_by_a_state_request() -> None:
    ctx = context(check=lambda values, path: [] if values.get("port") != 1 else ["Blueprint variable port: too low"])
    up = _up(ctx)
    rejected = advance(ctx, up, Update({**CLIENT, "port": 1}, current_version=4)).status
    assert (rejected.state, rejected.version, rejected.model_state) == ("update_rejected", 6, "active")
    assert rejected.candidate_attributes == {**FULL, "port": 1}
    assert rejected.active_attributes == FULL  # what is deployed did not change
    assert rejected.validation_problems == ["Blueprint variable port: too low"]
    assert "state request up [clear candidate]" in (rejected.ways_out or [])

    aborted = advance(ctx, rejected, SetState("up", current_version=6, message="keep the old port")).status
    assert (aborted.state, aborted.version, aborted.candidate_attributes) == ("up", 7, None)
    assert aborted.active_attributes == FULL
    assert aborted.log[-1].operation == "clear candidate"
    assert aborted.log[-1].message == "abort the update; keep the old port"
    assert aborted.state_request == StateRequest(target="up", current_version=6, message="keep the old port")
    # the client's spec still says port 1, but that change was taken in already: seen again, it is no update
    assert advance(ctx, aborted, Update({**CLIENT, "port": 1}, current_version=4)).changed is False


def test_an_update_of_a_rejected_update_starts_from_the_candidate_set() -> None:
    ctx = context()
    rejected = at("update_rejected", 6, candidate={**FULL, "port": "bad", "size": 2.5}, active=FULL,
                  client={**CLIENT, "port": "bad", "size": 2.5})
    out = advance(ctx, rejected, Update({**CLIENT, "port": 7000, "size": 2.5}))
    assert steps(out)[0] == ("update_rejected", "update_start", "on_update")
    assert out.status.state == "update_inprogress"
    assert out.status.active_attributes == {**FULL, "port": 7000, "size": 2.5}


def test_an_update_starts_from_a_copy_of_the_active_set_and_keeps_r_attributes() -> None:
    ctx = context()
    up = at("up", 4, active={**FULL, "size": 1.0, "address": "10.0.0.7"}, client={**CLIENT, "size": 1.0})
    out = advance(ctx, up, Update({**CLIENT, "tags": []}))  # size removed, tags changed
    assert out.status.active_attributes == {**FULL, "tags": [], "address": "10.0.0.7"}
    # a removed attribute with a default gets its default back
    again = advance(ctx, at("up", 4, active={**FULL, "tags": ["x"]}, client={**CLIENT, "tags": ["x"]}), Update(CLIENT))
    assert again.status.active_attributes == FULL


def test_an_update_whose_deployment_fails_is_rolled_back_to_the_previous_values() -> None:
    ctx = context()
    inprogress = at("update_inprogress", 7, active={**FULL, "port": 6000}, rollback=FULL)
    failed = advance(ctx, inprogress, ResourceOutcome(success=False, message="port in use")).status
    assert (failed.state, failed.version, failed.model_state) == ("update_failed", 8, "active")
    assert advance(ctx, failed, ResourceOutcome(success=False)).transfers == ()  # update_failed stays, unexecuted
    rolled = advance(ctx, failed, SetState("rollback", current_version=8)).status
    assert (rolled.state, rolled.version) == ("rollback", 9)
    assert rolled.active_attributes == FULL
    assert rolled.candidate_attributes == {**FULL, "port": 6000}
    assert rolled.rollback_attributes is None
    assert rolled.log[-1].operation == "rollback"
    up = advance(ctx, rolled, ResourceOutcome(success=True)).status
    assert (up.state, up.version, up.active_attributes) == ("up", 10, FULL)
    broken = advance(ctx, rolled, ResourceOutcome(success=False)).status
    assert broken.state == "failed"


def test_delete_purges_then_terminates() -> None:
    ctx = context()
    up = _up(ctx)
    deleting = advance(ctx, up, Delete(current_version=4)).status
    assert (deleting.state, deleting.version, deleting.model_state) == ("deleting", 5, "active")
    assert advance(ctx, deleting, ResourceOutcome(success=False)).transfers == ()  # deleting -> deleting: unexecuted
    gone = advance(ctx, deleting, ResourceOutcome(success=True)).status
    assert (gone.state, gone.version, gone.deleted, gone.model_state) == ("terminated", 6, True, "inactive")
    # a deleted instance: deletes and deployment outcomes change nothing, requests are refused
    assert advance(ctx, gone, Delete()).changed is False
    assert advance(ctx, gone, ResourceOutcome(success=True)).changed is False
    refused = _refusal(ctx, gone, Update({**CLIENT, "port": 1}))
    assert (refused.code, refused.reason, refused.message) == (
        409, "Deleted", 'service instance db-1 is deleted (state "terminated")')


def test_outputs_of_the_app_fill_r_attributes_of_the_active_set() -> None:
    ctx = context()
    creating = create(ctx).status
    up = advance(ctx, creating, ResourceOutcome(success=True, outputs={"address": "10.0.0.1", "port": 1})).status
    assert up.active_attributes == {**FULL, "address": "10.0.0.1"}  # port is no r attribute: never taken from the App
    # a repair that finds a new address is executed although up -> up has no operation: something changed
    moved = advance(ctx, up, ResourceOutcome(success=True, outputs={"address": "10.0.0.2"}))
    assert steps(moved) == [("up", "up", "resource_based")]
    assert (up.version, moved.status.version) == (4, 5)
    assert (moved.status.active_attributes or {})["address"] == "10.0.0.2"
    # the same address again: nothing to do
    assert advance(ctx, moved.status, ResourceOutcome(success=True, outputs={"address": "10.0.0.2"})).changed is False


def test_an_outcome_in_a_state_that_waits_for_none_is_ignored() -> None:
    ctx = context()
    rejected = create(ctx, {**CLIENT, "port": "x"}).status
    assert advance(ctx, rejected, ResourceOutcome(success=False)).changed is False


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", [
    Update({**CLIENT, "port": 1}, current_version=3),
    SetState("up", current_version=3),
    Delete(current_version=3),
])
def test_a_stale_version_is_refused_with_inmantas_message(trigger: Any) -> None:
    ctx = context()
    status = at("update_rejected", 4, candidate=FULL, active=FULL)
    refused = _refusal(ctx, status, trigger)
    assert (refused.code, refused.reason) == (409, "StaleVersion")
    assert refused.message == "The given current version (3) doesn't match the actual current version (4) of " \
                              "service instance db-1"


def test_an_update_where_the_state_has_no_on_update_transfer_names_the_states_that_have_one() -> None:
    refused = _refusal(context(), at("creating", 3, active=FULL), Update({**CLIENT, "port": 1}, current_version=3))
    assert (refused.code, refused.reason) == (409, "UpdateNotAllowed")
    assert refused.message == ('service instance db-1 in state "creating" cannot be updated: the state has no '
                               "on_update transfer (states that allow an update: rejected, up, update_rejected)")


def test_a_delete_where_the_state_has_no_on_delete_transfer_names_the_states_that_have_one() -> None:
    refused = _refusal(context(), at("update_start", 5, candidate=FULL, active=FULL), Delete())
    assert (refused.code, refused.reason) == (409, "DeleteNotAllowed")
    assert refused.message == ('service instance db-1 in state "update_start" cannot be deleted: the state has no '
                               "on_delete transfer (states that allow a delete: rejected, creating, up, failed, "
                               "update_failed)")
    basic = _refusal(context("testing_basic_lifecycle"), at("failed", 5, active=FULL), Delete())
    assert basic.message.endswith("(states that allow a delete: up)")


def test_an_update_may_not_send_r_attributes_nor_change_rw_ones() -> None:
    ctx = context()
    up = _up(ctx)
    read_only = _refusal(ctx, up, Update({**CLIENT, "address": "10.0.0.9"}))
    assert (read_only.code, read_only.reason) == (422, "ReadOnlyAttribute")
    assert read_only.message.startswith("spec.attributes.address: read-only (modifier r)")
    rw = _refusal(ctx, up, Update({**CLIENT, "region": "us", "name": "db-2"}))
    assert (rw.code, rw.reason) == (422, "ImmutableAttribute")
    assert rw.message == ("spec.attributes.name: set at creation only (modifier rw); rw+ attributes may change; "
                          "spec.attributes.region: set at creation only (modifier rw); rw+ attributes may change")
    removed = _refusal(ctx, up, Update({"name": "db-1", "port": 5432}))  # region dropped is a change too
    assert removed.reason == "ImmutableAttribute"
    unknown = _refusal(ctx, up, Update({**CLIENT, "colour": "red"}))
    assert (unknown.code, unknown.reason) == (422, "UnknownAttribute")


def test_a_state_request_must_match_an_api_set_state_transfer() -> None:
    ctx = context()
    refused = _refusal(ctx, at("update_failed", 8, active=FULL, rollback=OLD), SetState("up", current_version=8))
    assert (refused.code, refused.reason) == (409, "TransferNotAllowed")
    assert refused.message == ('service instance db-1 in state "update_failed" cannot be set to "up": no '
                               'api_set_state transfer leads there (from "update_failed" a state request may ask '
                               "for: rollback)")
    unknown = _refusal(ctx, _up(ctx), SetState("nowhere", current_version=4))
    assert (unknown.code, unknown.reason) == (422, "UnknownState")
    assert unknown.message.startswith('stateRequest.target: "nowhere" is not a state of the lifecycle (states: start, ')
    none = _refusal(ctx, _up(ctx), SetState("rollback", current_version=4))
    assert none.message.endswith('(from "up" a state request may ask for: none)')


def test_a_refusal_changes_nothing() -> None:
    ctx = context()
    up = _up(ctx)
    before = up.model_dump()
    _refusal(ctx, up, Update({**CLIENT, "region": "us"}))
    assert up.model_dump() == before


def test_the_spec_state_request_is_handled_once() -> None:
    request = StateRequest(target="up", current_version=6)
    spec = ServiceInstanceSpec(entity="database", attributes=CLIENT, state_request=request)
    rejected = at("update_rejected", 6, candidate=FULL, active=FULL)
    assert pending_request(spec, rejected) == request
    taken = advance(context(), rejected, SetState(request.target, request.current_version)).status
    assert pending_request(spec, taken) is None
    assert pending_request(ServiceInstanceSpec(entity="database"), taken) is None


# --- service: the design gate and config switches ------------------------------------------------


def test_service_goes_through_designed_to_creating_when_its_auto_transfers_are_on() -> None:
    out = create(context("service"))
    assert [to for _, to, _ in steps(out)] == ["start", "acknowledged", "designed", "creating"]
    assert out.status.active_attributes == FULL


def test_a_config_switch_stops_an_instance_where_a_state_request_takes_over() -> None:
    ctx = context("service", config={"auto_designed": False, "auto_creating": False})
    acknowledged = create(ctx).status
    assert (acknowledged.state, acknowledged.version, acknowledged.model_state) == ("acknowledged", 2, "candidate")
    assert acknowledged.ways_out == [
        "auto -> designed (switched off: config auto_designed is false) (validated; fails -> rejected)",
        "state request designed (validated; fails -> rejected)",
        "state request acknowledged (validated; fails -> rejected)",
        "delete -> terminated",
    ]
    # revalidating passes: a self-transfer with no operation is not executed
    same = advance(ctx, acknowledged, SetState("acknowledged", current_version=2))
    assert (same.transfers, same.status.version) == ((), 2)
    designed = advance(ctx, acknowledged, SetState("designed", current_version=2)).status
    assert (designed.state, designed.version, designed.model_state) == ("designed", 3, "designed")
    assert designed.candidate_attributes == FULL and designed.active_attributes is None
    creating = advance(ctx, designed, SetState("creating", current_version=3)).status
    assert (creating.state, creating.active_attributes) == ("creating", FULL)


def test_a_revalidation_that_fails_rejects() -> None:
    ctx = context("service", config={"auto_designed": False}, check=failing("Blueprint variable port: taken"))
    acknowledged = at("acknowledged", 2, lifecycle="service", candidate=FULL)
    out = advance(ctx, acknowledged, SetState("acknowledged", current_version=2))
    assert steps(out) == [("acknowledged", "rejected", "api_set_state")]
    assert out.status.validation_problems == ["Blueprint variable port: taken"]


def test_switching_an_auto_transfer_back_on_moves_waiting_instances_on() -> None:
    waiting = create(context("service", config={"auto_designed": False})).status
    assert waiting.state == "acknowledged"
    out = advance(context("service"), waiting, Auto())
    assert [to for _, to, _ in steps(out)] == ["designed", "creating"]
    assert advance(context("service"), out.status, Auto()).changed is False


# --- operations ----------------------------------------------------------------------------------


def _two_states(operation: Operation) -> LifecycleSpec:
    return LifecycleSpec.model_validate({
        "initialState": "a",
        "states": [{"name": "a"}, {"name": "b"}],
        "transfers": [{"source": "a", "target": "b", "apiSetState": True, "targetOperation": operation},
                      {"source": "b", "target": "a", "apiSetState": True}],
    })


C, A, R = {"port": 1}, {"port": 2}, {"port": 3}


@pytest.mark.parametrize(("operation", "sets", "note"), [
    ("clear candidate", (None, A, R), None),
    ("clear active", (C, None, R), None),
    ("clear rollback", (C, A, None), None),
    ("promote", (None, C, A), None),
    ("rollback", (A, R, None), None),
])
def test_operations_on_the_attribute_sets(operation: Operation, sets: tuple[Any, Any, Any], note: str | None) -> None:
    lifecycle = _two_states(operation)
    out = advance(context(lifecycle), at("a", 1, lifecycle=lifecycle, candidate=C, active=A, rollback=R),
                  SetState("b", current_version=1))
    status = out.status
    assert (status.candidate_attributes, status.active_attributes, status.rollback_attributes) == sets
    assert (status.state, status.version, out.transfers[0].operation) == ("b", 2, operation)


def test_an_operation_with_nothing_to_move_leaves_the_sets_and_says_so() -> None:
    lifecycle = _two_states("promote")
    promote = advance(context(lifecycle), at("a", 1, lifecycle=lifecycle, active=A, rollback=R), SetState("b"))
    assert (promote.status.active_attributes, promote.status.rollback_attributes) == (A, R)
    assert promote.transfers[0].message == "promote: no candidate set, nothing promoted"
    lifecycle = _two_states("rollback")
    rollback = advance(context(lifecycle), at("a", 1, lifecycle=lifecycle, candidate=C, active=A), SetState("b"))
    assert (rollback.status.candidate_attributes, rollback.status.active_attributes) == (C, A)
    assert rollback.transfers[0].message == "rollback: no rollback set, nothing rolled back"


def test_a_validation_checks_the_set_the_source_state_names() -> None:
    lifecycle = LifecycleSpec.model_validate({
        "initialState": "a",
        "states": [{"name": "a", "validateSelf": "active"}, {"name": "b"}, {"name": "bad"}],
        "transfers": [{"source": "a", "target": "b", "error": "bad", "apiSetState": True, "validate": True},
                      {"source": "b", "target": "a", "apiSetState": True},
                      {"source": "bad", "target": "a", "apiSetState": True}],
    })
    ctx = context(lifecycle)
    bad_active = advance(ctx, at("a", 1, lifecycle=lifecycle, candidate=FULL, active={**FULL, "size": "big"}),
                         SetState("b"))
    assert bad_active.status.state == "bad"
    assert bad_active.status.validation_problems == ["status.activeAttributes.size: expected float, got string"]
    no_active = advance(ctx, at("a", 1, lifecycle=lifecycle, candidate=FULL), SetState("b"))
    assert no_active.status.validation_problems == [
        "status.activeAttributes: there is no active attribute set to validate"]
    good = advance(ctx, at("a", 1, lifecycle=lifecycle, candidate={"port": "x"}, active={**FULL, "size": 2}),
                   SetState("b"))
    assert good.status.state == "b"


# --- versions, the log, broken lifecycles --------------------------------------------------------


def test_every_executed_transfer_increments_the_version_by_one() -> None:
    ctx = context()
    status = create(ctx).status
    versions = [e.version for e in status.log]
    for trigger in (ResourceOutcome(success=True), Update({**CLIENT, "port": 1}), ResourceOutcome(success=False),
                    SetState("rollback"), ResourceOutcome(success=True), Delete(), ResourceOutcome(success=True)):
        status = advance(ctx, status, trigger).status
        versions = [e.version for e in status.log]
        assert versions == list(range(1, len(versions) + 1))
    assert status.state == "terminated"
    assert status.version == versions[-1] == 12


def test_the_log_is_bounded_oldest_first() -> None:
    ctx = context()
    status = _up(ctx)
    old = [LogEntry(from_="up", to="up", trigger="resource_based", version=i, time="t") for i in range(LOG_LIMIT)]
    status = status.model_copy(update={"log": old})
    out = advance(ctx, status, Delete()).status
    assert len(out.log) == LOG_LIMIT
    assert out.log[0].version == 1 and out.log[-1].to == "deleting"


def test_auto_transfers_that_never_settle_are_reported_and_nothing_is_applied() -> None:
    loop = LifecycleSpec.model_validate({  # refused by lifecycle validation; here as if it bypassed the webhook
        "initialState": "a",
        "states": [{"name": "a"}, {"name": "b"}],
        "transfers": [{"source": "a", "target": "b", "auto": True, "targetOperation": "promote"},
                      {"source": "b", "target": "a", "auto": True, "targetOperation": "rollback"}],
    })
    with pytest.raises(LifecycleError) as caught:
        create(context(loop))
    assert caught.value.reason == "AutoTransfersLoop"
    assert caught.value.message.startswith(f"auto transfers did not settle after {AUTO_LIMIT}: a -> b -> a -> b")


def test_a_state_the_lifecycle_no_longer_has_is_reported() -> None:
    with pytest.raises(LifecycleError) as caught:
        advance(context(), at("up", 4, active=FULL).model_copy(update={"state": "gone"}), Auto())
    assert caught.value.reason == "UnknownState"
    assert caught.value.message.startswith('"gone" is not a state of the lifecycle any more')
    with pytest.raises(LifecycleError) as never:
        advance(context(), ServiceInstanceStatus(), Delete())
    assert never.value.reason == "NotCreated"


def test_testing_basic_lifecycle_validates_promotes_and_a_rejection_is_final() -> None:
    ctx = context("testing_basic_lifecycle")
    out = create(ctx)
    assert steps(out) == [(None, "start", "create"), ("start", "creating", "auto")]
    assert out.status.active_attributes == FULL
    stuck = advance(ctx, out.status, ResourceOutcome(success=False))  # creating -> creating: not executed
    assert stuck.transfers == ()
    rejected = create(ctx, {**CLIENT, "port": None}).status
    assert (rejected.state, rejected.deleted) == ("rejected", True)
    assert rejected.validation_problems == ["spec.attributes.port: required (null given)"]
