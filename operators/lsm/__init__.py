"""The service lifecycle manager (issue 15): a service catalog (ServiceEntity), lifecycles
(Lifecycle, and the built-ins every namespace can use) and service instances (ServiceInstance)
that move through their lifecycle's states as clients create, update, delete and ask.

This is the pure core: the models (the schema of the three kinds), the checks that refuse a
broken Lifecycle or ServiceEntity naming the field, and the state machine engine. It does no
I/O; the kinds' pipelines, admission and the inventory HTTP API are built on it.

    outcome = advance(Context(...), status, Update(attributes, current_version=4))

The kinds the operator serves (`KINDS`: steps, admission, the App that realizes an instance) are in
`operators.lsm.kinds`, imported on first use: the pure core does not pay for them.
"""

from typing import TYPE_CHECKING, Any

from operators.lsm.attributes import service_entity_problems
from operators.lsm.builtin import BUILTINS
from operators.lsm.lifecycle import config_problems, lifecycle_problems, model_states, resource_intent
from operators.lsm.machine import (
    Auto,
    Context,
    Create,
    Delete,
    LifecycleError,
    Outcome,
    Refused,
    ResourceOutcome,
    SetState,
    Trigger,
    Update,
    advance,
    pending_request,
)
from operators.lsm.models import (
    LIFECYCLE,
    SERVICE_ENTITY,
    SERVICE_INSTANCE,
    LifecycleSpec,
    LifecycleStatus,
    ServiceEntitySpec,
    ServiceEntityStatus,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
)

if TYPE_CHECKING:
    from operators.lsm.kinds import KINDS

__all__ = [
    "BUILTINS",
    "KINDS",
    "LIFECYCLE",
    "SERVICE_ENTITY",
    "SERVICE_INSTANCE",
    "Auto",
    "Context",
    "Create",
    "Delete",
    "LifecycleError",
    "LifecycleSpec",
    "LifecycleStatus",
    "Outcome",
    "Refused",
    "ResourceOutcome",
    "ServiceEntitySpec",
    "ServiceEntityStatus",
    "ServiceInstanceSpec",
    "ServiceInstanceStatus",
    "SetState",
    "Trigger",
    "Update",
    "advance",
    "config_problems",
    "lifecycle_problems",
    "model_states",
    "pending_request",
    "resource_intent",
    "service_entity_problems",
]


def __getattr__(name: str) -> Any:
    if name == "KINDS":
        from operators.lsm import kinds

        return kinds.KINDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
