"""The ServiceInstance kind: the client's attributes and requests (state, expert, migration) in spec; state,
version, the attribute sets, the log and what would change in status."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

from operators.lsm.models.common import (
    AttributeName,
    AttributeSet,
    FreeForm,
    ModelState,
    ObjectName,
    Operation,
    StateName,
    TriggerName,
)
from operators.lsm.models.entity import Migration
from operators.runtime import Model, PrinterColumn, StatusBase

# --- ServiceInstance -----------------------------------------------------------------------------


class StateRequest(Model):
    """A request to move the instance to a state (Inmanta's api_set_state)."""

    target: StateName = Field(description="The state asked for; an api_set_state transfer from the current state "
                              "to it must exist.")
    current_version: int = Field(
        ge=1, description="The version the requester saw (status.version); a stale one is refused (409)."
    )
    message: str | None = Field(None, max_length=1024, description="Why, for the log.")


# --- Expert mode ---------------------------------------------------------------------------------

ExpertOperation = Literal["setState", "editAttributes", "destroy"]
EXPERT_VERB = "expert"
"""The RBAC verb on `serviceinstances` an expert request needs (ClusterRole stead-expert grants it; `edit`
does not): the API server checks it (the ValidatingAdmissionPolicy of `operators.lsm.expert`)."""


class ExpertRequest(Model):
    """An expert operation (Inmanta's expert mode): it bypasses the lifecycle, so it needs its own permission
    (verb `expert` on serviceinstances.stead.dev) and is always audited, naming the user."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self.operation != 'setState' || has(self.state)",
         "message": "state: required for operation setState (the state to force)"},
        {"rule": "self.operation != 'editAttributes' || (has(self.set) && has(self.attributes))",
         "message": "set and attributes: required for operation editAttributes (which set, and its new values)"},
    ]})

    operation: ExpertOperation = Field(
        description="setState: force the instance into a state (no transfer, no validation); editAttributes: "
        "replace one attribute set as given (no validation); destroy: delete the instance and its App without "
        "the lifecycle's delete path."
    )
    user: Annotated[str, StringConstraints(min_length=1, max_length=512)] = Field(
        description="Who asks: must be the requesting user's name as the API server authenticated it "
        "(`kubectl auth whoami`); the API server refuses any other, so the log and the Event name the real user."
    )
    current_version: int = Field(
        ge=1, description="The version the expert saw (status.version); a stale one is refused (409)."
    )
    state: StateName | None = Field(None, description="setState: the state to force (any state of the lifecycle).")
    set_: AttributeSet | None = Field(
        None, alias="set", description="editAttributes: which set to replace: candidate, active or rollback."
    )
    attributes: FreeForm | None = Field(
        None, description="editAttributes: the set's new values, whole ({} removes the set). Not validated."
    )
    message: str | None = Field(None, max_length=1024, description="Why, for the log and the Event.")


class ServiceInstanceSpec(Model):
    """One service instance: which entity, the client's attributes, and an optional state request."""

    entity: ObjectName = Field(description="The ServiceEntity (same namespace).")
    attributes: FreeForm = Field(
        default_factory=dict,
        description="The client's attributes (rw and rw+ ones; r attributes are Stead's). A change is an "
        "update, allowed only where the lifecycle has an on_update transfer.",
    )
    current_version: int | None = Field(
        None, ge=1, description="The version the client saw (status.version); an update from a stale one is "
        "refused (409)."
    )
    state_request: StateRequest | None = Field(None, description="Move the instance to a state (api_set_state).")
    expert: ExpertRequest | None = Field(
        None, description="An expert operation, taken once (needs verb expert on serviceinstances.stead.dev)."
    )
    entity_version: int | None = Field(
        None, ge=1, description="The entity version the instance uses (absent: the entity's current one when it is "
        "created; it then stays on it). A change is a migration and needs spec.migration.",
    )
    migration: Migration | None = Field(
        None, description="With a change of spec.entityVersion: the state the instance lands in and the values "
        "the new version needs. Ignored while spec.entityVersion is the version in force."
    )


class LogEntry(Model):
    """One transfer in an instance's life."""

    from_: str | None = Field(None, alias="from", description="The state left (none at creation).")
    to: str = Field(description="The state reached.")
    trigger: TriggerName = Field(
        description="create, auto, api_set_state, on_update, on_delete, resource_based, expert (an expert "
        "operation: `user` names who) or migrate (to another entity version)."
    )
    version: int = Field(description="The instance's version after the transfer.")
    time: str = Field(description="When (RFC 3339).")
    operation: Operation | None = Field(None, description="The operation applied to the attribute sets.")
    error: bool = Field(False, description="Whether the error path was taken (failed validation or deployment).")
    message: str | None = Field(None, description="What happened: the transfer, a request's message, a reason.")
    user: str | None = Field(None, description="Who, for an expert operation (trigger expert).")


class RefusedRequest(Model):
    """A client's request the lifecycle refused after admission (the instance had moved on meanwhile, or
    the webhook was bypassed): recorded so that it is handled once, and shown until the spec changes."""

    trigger: TriggerName = Field(description="What was asked: api_set_state, on_update, on_delete, expert or "
                                 "migrate.")
    reason: str = Field(description="Why, in one CamelCase word (StaleVersion, UpdateNotAllowed, ...).")
    message: str = Field(description="Why, for humans; the same text the webhook or the API would answer.")
    generation: int = Field(description="The metadata.generation (spec) the request came with.")
    time: str = Field(description="When it was refused (RFC 3339).")


# --- What would change (issue 31, item 4) ------------------------------------------------------

DiffStatus = Literal["pending", "applied", "discarded"]
AppAction = Literal["create", "update", "delete", "none"]


class AttributeChange(Model):
    """One attribute the candidate set changes in force: its value in the active set, and after."""

    name: AttributeName = Field(description="The attribute.")
    old: Any = Field(None, description="Its value in the active set now (absent: not set).")
    new: Any = Field(None, description="Its value once the candidate set is in force (absent: removed).")


class InputChange(Model):
    """One App input the candidate set changes: the live App's value, and the one it would get."""

    variable: str = Field(description="The Blueprint's runtime variable (an App input).")
    old: str | None = Field(None, description="The live App's input now (absent: no App, or not given).")
    new: str | None = Field(None, description="What the App would get (absent: not given: the Blueprint's default).")
    secret: bool = Field(False, description="A secret variable: both values are masked, never shown.")


class ServiceDiff(Model):
    """What would change if the instance's waiting candidate set went ahead: the lifecycle's path (the
    state requests that approve it and the transfers they set off, as the engine computes them, without
    taking them), the App action that would run, the attributes and App inputs that change. Computed when
    a candidate set waits (an update or a creation taken in), never by running anything."""

    status: DiffStatus = Field(description="pending: the candidate set waits; applied: it was promoted "
                               "(appliedVersion); discarded: it was cleared or replaced without being promoted.")
    version: int = Field(description="The instance's version the diff was computed at.")
    state: str = Field(description="The state the candidate set waits in.")
    requests: list[str] = Field(default_factory=list, description="The state requests that carry it forward, in "
                                "order (none: the lifecycle takes it on by itself, or nothing can).")
    transfers: list[str] = Field(default_factory=list, description="The transfers those requests set off "
                                 "(from -> to, trigger, operation), as the engine would take them.")
    target: str | None = Field(None, description="The state the instance would reach (where the App is acted on).")
    action: AppAction = Field(description="The App action that would run: create (the App is launched), update "
                              "(its `update` action runs with the new inputs), delete, or none.")
    app: str | None = Field(None, description="The App acted on.")
    action_run: str | None = Field(None, description="The ActionRun of an update action, as it would be named.")
    attributes: list[AttributeChange] = Field(default_factory=list, description="The attributes that change.")
    inputs: list[InputChange] = Field(default_factory=list, description="The App inputs that change.")
    message: str = Field(description="The diff in one sentence.")
    applied_version: int | None = Field(None, description="The version at which it was promoted (status applied).")


class ServiceInstanceStatus(StatusBase):
    """Written by Stead."""

    state: str | None = Field(None, description="The lifecycle state.")
    version: int | None = Field(None, description="Incremented by every transfer; requests carry it back.")
    model_state: ModelState | None = Field(
        None, description="inactive, candidate, designed or active, derived from the state's flags."
    )
    identity: str | None = Field(None, description="The value of the service identity attribute.")
    entity_version: int | None = Field(None, description="The entity version the instance uses.")
    candidate_attributes: FreeForm | None = Field(
        None, description="Attributes being created or updated, not yet in force."
    )
    active_attributes: FreeForm | None = Field(None, description="The attributes in force (the App's inputs).")
    rollback_attributes: FreeForm | None = Field(None, description="The attributes in force before the last promote.")
    client_attributes: FreeForm | None = Field(
        None, description="spec.attributes as last taken in: an update is the difference from these."
    )
    validation_problems: list[str] | None = Field(
        None, description="Why the last validation failed (cleared by the next one that passes)."
    )
    ways_out: list[str] | None = Field(
        None, description="The transfers that leave the current state, and their triggers."
    )
    app: str | None = Field(None, description="The App that realizes the instance.")
    references: list[str] | None = Field(
        None, description="The ServiceInstances this one names in its relations (any attribute set), by name."
    )
    deleted: bool | None = Field(None, description="The instance reached a deleted state.")
    state_request: StateRequest | None = Field(
        None, description="The last state request taken in (accepted or refused), so that each is handled once."
    )
    delete_requested: bool | None = Field(
        None, description="The deletion was taken in (sent to the lifecycle once: its on_delete transfer)."
    )
    refused: RefusedRequest | None = Field(
        None, description="The client's last request refused by the lifecycle after admission, until the next one."
    )
    expert: ExpertRequest | None = Field(
        None, description="The last expert request taken in (done or refused), so that each is handled once."
    )
    destroyed: bool | None = Field(
        None, description="An expert destroyed the instance: it goes, with its App, without its lifecycle's delete."
    )
    log: list[LogEntry] = Field(
        default_factory=list, description="The latest transfers, oldest first (bounded)."
    )
    diff: ServiceDiff | None = Field(
        None, description="What would change if the waiting candidate set went ahead (`stead service diff`), "
        "or what its promotion changed (status applied)."
    )




SERVICE_INSTANCE_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Entity", ".spec.entity", description="The service entity."),
    PrinterColumn("Identity", ".status.identity", description="The service identity's value."),
    PrinterColumn("State", ".status.state", description="The lifecycle state."),
    PrinterColumn("Version", ".status.version", type="integer", description="The instance's version."),
    PrinterColumn("EntityVersion", ".status.entityVersion", type="integer", description="The entity version it uses."),
    PrinterColumn("References", ".status.references", priority=1,
                  description="The instances it names in its relations (kubectl get -o wide)."),
)
"""The kinds' own printer columns (the runtime adds Phase, Ready and Age)."""
