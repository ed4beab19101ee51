"""A ServiceInstance client's triggers: what creation, a state request, an attribute update and a delete
ask the lifecycle for, taken in or checked.

Its own module because two callers share it and neither needs the rest of the kind: the instance's
pipeline (`operators.lsm.instance`) takes the triggers in (a refused request or update recorded in
status, handled once), and the admission webhook and the inventory API (`operators.lsm.api`) run the
same engine on a write and refuse it with the engine's code (409, 422) and message.
"""

from __future__ import annotations

from operators.lsm.attributes import changed_keys
from operators.lsm.expert import apply_expert, pending_expert
from operators.lsm.machine import Auto, Create, Delete, Refused, SetState, Update, pending_request
from operators.lsm.models import LogEntry, RefusedRequest, ServiceInstanceSpec, ServiceInstanceStatus, TriggerName
from operators.lsm.related import check_relations, refuse_if_referenced
from operators.lsm.versions import migrate
from operators.lsm.world import World
from operators.runtime import utc_now


async def take_client_triggers(world: World, spec: ServiceInstanceSpec, status: ServiceInstanceStatus,
                               generation: int) -> tuple[ServiceInstanceStatus, list[LogEntry]]:
    """Creation, a pending state request, a change of the attributes, then auto transfers. A refused
    creation raises `Refused`; a refused request or update is recorded in status instead (handled once).
    Raises `LifecycleError` when the lifecycle cannot go on."""
    transfers: list[LogEntry] = []
    if status.state is None:
        outcome = await world.advance(status, Create(spec.attributes))
        status, transfers = outcome.status, list(outcome.transfers)
    expert = pending_expert(spec, status)
    if expert is not None:
        try:
            outcome = apply_expert(world.context(), status, expert)
        except Refused as refusal:
            record = RefusedRequest(trigger="expert", reason=refusal.reason, message=refusal.message,
                                    generation=generation, time=utc_now())
            status = status.model_copy(update={"refused": record, "expert": expert})
        else:
            status, transfers = outcome.status, [*transfers, *outcome.transfers]
    if status.destroyed:
        return status, transfers  # it goes as it is: nothing of its lifecycle runs any more
    request = pending_request(spec, status)
    if request is not None:
        trigger = SetState(request.target, request.current_version, request.message)
        status, taken = await _take(world, status, trigger, "api_set_state", generation)
        if taken is None:
            status = status.model_copy(update={"state_request": request})
        transfers += taken or []
    refused = status.refused
    retried = refused is not None and refused.trigger == "on_update" and refused.generation == generation
    if not retried and changed_keys(status.client_attributes or {}, spec.attributes):
        status, taken = await _take(world, status, Update(spec.attributes, spec.current_version), "on_update",
                                    generation)
        transfers += taken or []
    outcome = await world.advance(status, Auto())
    return outcome.status, [*transfers, *outcome.transfers]


async def _take(world: World, status: ServiceInstanceStatus, trigger: SetState | Update | Delete,
                name: TriggerName, generation: int) -> tuple[ServiceInstanceStatus, list[LogEntry] | None]:
    """Apply a client's trigger: the new status and its transfers, or the status with the refusal recorded
    and None."""
    try:
        outcome = await world.advance(status, trigger)
    except Refused as refusal:
        return _refusal(status, refusal, name, generation), None
    return outcome.status.model_copy(update={"refused": None}), list(outcome.transfers)


async def check_request(world: World, spec: ServiceInstanceSpec, status: ServiceInstanceStatus,
                        old_spec: ServiceInstanceSpec | None = None) -> None:
    """Refuse (`Refused`, 409 or 422) what a client's write would ask the lifecycle for and it does not
    allow: the admission webhook's check, which the inventory API shares. `old_spec` is the spec the write
    replaces (None for a creation); what did not change in it asks for nothing."""
    if status.state is None:
        if old_spec is None or old_spec.attributes != spec.attributes:
            await world.advance(ServiceInstanceStatus(), Create(spec.attributes))
            await check_relations(world, spec.attributes)
        return
    expert = pending_expert(spec, status)
    new_expert = expert is not None and (old_spec is None or old_spec.expert != spec.expert)
    request = pending_request(spec, status)
    new_request = request is not None and (old_spec is None or old_spec.state_request != spec.state_request)
    new_attributes = old_spec is None or old_spec.attributes != spec.attributes
    updating = new_attributes and bool(changed_keys(status.client_attributes or {}, spec.attributes))
    if new_expert and expert is not None:
        if new_request or updating:
            raise Refused("spec: one request at a time: an expert request (spec.expert) goes alone, without a "
                          "change of spec.attributes or spec.stateRequest", 422, "OneRequestAtATime")
        apply_expert(world.context(), status, expert)
        return
    if new_request and updating:
        raise Refused("spec: one request at a time: change spec.attributes (an update) or spec.stateRequest (a "
                      "state request), not both in one write", 422, "OneRequestAtATime")
    if new_request and request is not None:
        await world.advance(status, SetState(request.target, request.current_version, request.message))
    elif updating:
        await world.advance(status, Update(spec.attributes, spec.current_version))
        changed = changed_keys(status.client_attributes or {}, spec.attributes)
        await check_relations(world, {key: spec.attributes[key] for key in changed if key in spec.attributes})


async def check_delete(world: World, status: ServiceInstanceStatus, current_version: int | None = None) -> None:
    """Refuse (`Refused`, 409) a delete the lifecycle does not allow in the instance's state: the admission
    webhook's check on DELETE, which the inventory API shares. An instance already in a deleted state, or
    destroyed in expert mode (the expert's call), may always go; else one another instance still names in a
    relation may not (409, naming them); else one never created, or whose delete was taken in already, may."""
    if status.deleted or status.destroyed:
        return
    await refuse_if_referenced(world.services, world.namespace, world.instance)
    if status.state is None or status.delete_requested:
        return
    await world.advance(status, Delete(current_version))


def _refusal(status: ServiceInstanceStatus, refusal: Refused, name: TriggerName, generation: int
             ) -> ServiceInstanceStatus:
    return status.model_copy(update={"refused": RefusedRequest(
        trigger=name, reason=refusal.reason, message=refusal.message, generation=generation, time=utc_now())})


def take_migration(source: World, target: World | Refused, spec: ServiceInstanceSpec, status: ServiceInstanceStatus,
                   generation: int) -> tuple[ServiceInstanceStatus, list[LogEntry], World]:
    """Move the instance to the version its spec names (`target`, that version's world, or why there is none):
    the migrated status, its transfer and the world it now lives in; a refusal is recorded in status (shown
    until the spec changes, not retried at the same generation) and the instance stays in `source`."""
    refused = status.refused
    if refused is not None and refused.trigger == "migrate" and refused.generation == generation:
        return status, [], source
    try:
        if isinstance(target, Refused):
            raise target
        outcome = migrate(target.context(), status, source.entity_version, target.entity_version, spec.migration)
    except Refused as refusal:
        return _refusal(status, refusal, "migrate", generation), [], source
    return outcome.status, list(outcome.transfers), target


def check_migration(source: World, target: World, spec: ServiceInstanceSpec, status: ServiceInstanceStatus) -> None:
    """Refuse (`Refused`, 422 or 409) a migration that would be refused when taken in: the admission webhook's
    check, which the inventory API shares."""
    migrate(target.context(), status, source.entity_version, target.entity_version, spec.migration)
