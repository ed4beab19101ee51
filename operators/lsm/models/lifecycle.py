"""The Lifecycle and ClusterLifecycle kinds: states, transfers between them, an initial state."""

from __future__ import annotations

from pydantic import Field

from operators.lsm.models.common import (
    ConfigName,
    Label,
    ModelState,
    Operation,
    StateName,
    ValidationSet,
)
from operators.runtime import Model, PrinterColumn, StatusBase

# --- Lifecycle -----------------------------------------------------------------------------------


class State(Model):
    """One state of a lifecycle; its flags say how an instance in it is treated."""

    name: StateName = Field(description="The state's name, unique in the lifecycle.")
    label: Label | None = Field(None, description="How a console shows it: success, info, warning or danger.")
    export_resources: bool = Field(
        False,
        description="The instance's resources are deployed in this state: its App runs with the active "
        "attribute set (an update reaches it as new inputs).",
    )
    validate_self: ValidationSet | None = Field(
        None, description="Which of the instance's own attribute sets a validation in this state checks: "
        "candidate or active (unset: candidate)."
    )
    validate_others: ValidationSet | None = Field(
        None,
        description="Which attribute set this instance contributes while other instances are validated "
        "(candidate or active; unset: none). A state that contributes but deploys nothing is `designed`.",
    )
    purge_resources: bool = Field(
        False, description="The instance's resources are removed in this state: its App is deleted."
    )
    deleted: bool = Field(
        False, description="Terminal: an instance arriving here is gone (its ServiceInstance object goes)."
    )
    description: str | None = Field(None, description="What the state means, for humans.")


class Transfer(Model):
    """A transfer from `source` to `target` (or to `error` when its validation or deployment fails),
    set off by its triggers."""

    source: StateName = Field(description="The state the transfer leaves.")
    target: StateName = Field(description="The state it leads to (on success, for a validating or resource-based one).")
    error: StateName | None = Field(
        None, description="Where a failed validation (validate) or a failed deployment (resourceBased) leads."
    )
    auto: bool = Field(False, description="Taken at once when an instance arrives in `source`.")
    api_set_state: bool = Field(
        False, description="Taken on a state request (spec.stateRequest or the API) naming `target`."
    )
    on_update: bool = Field(False, description="Taken when the client changes the attributes.")
    on_delete: bool = Field(False, description="Taken when the instance is deleted (kubectl delete or the API).")
    resource_based: bool = Field(
        False, description="Taken when the instance's App reaches its goal (to target) or fails (to error)."
    )
    validate_: bool = Field(
        False,
        alias="validate",
        description="Validate first (the attribute set the source state's validateSelf names, against the "
        "entity's attribute types, the Blueprint's variable rules and the identity's uniqueness): success "
        "leads to target, failure to error.",
    )
    config_name: ConfigName | None = Field(
        None, description="An auto transfer a ServiceEntity can switch off by this name (spec.config)."
    )
    target_operation: Operation | None = Field(
        None,
        description="Applied to the attribute sets on the way to target: clear candidate, clear active, "
        "clear rollback, promote (candidate -> active -> rollback) or rollback (rollback -> active -> candidate).",
    )
    error_operation: Operation | None = Field(None, description="Applied on the way to error; same choices.")
    description: str | None = Field(None, description="What the transfer does, for humans (shown in the log).")


class LifecycleSpec(Model):
    """A lifecycle: the states a service instance can be in and the transfers between them."""

    description: str | None = Field(None, description="What the lifecycle is for.")
    initial_state: StateName = Field(description="The state a new instance starts in.")
    states: list[State] = Field(
        min_length=1,
        description="The states, by unique name.",
        # The API server refuses duplicate names itself, naming the field, with no webhook round trip.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    transfers: list[Transfer] = Field(default_factory=list, description="The transfers between states.")


class LifecycleStatus(StatusBase):
    """Written by Stead."""

    state_count: int | None = Field(None, description="How many states the lifecycle has.")
    transfer_count: int | None = Field(None, description="How many transfers it has.")
    model_states: dict[str, ModelState] | None = Field(
        None,
        description="Each state's model state, derived from its flags: inactive (deleted, or never part of "
        "the model), candidate (validated alone), designed (validated with the others, not deployed), "
        "active (deployed).",
    )




LIFECYCLE_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Initial", ".spec.initialState", description="The initial state."),
    PrinterColumn("States", ".status.stateCount", type="integer", description="States."),
    PrinterColumn("Transfers", ".status.transferCount", type="integer", description="Transfers."),
)
