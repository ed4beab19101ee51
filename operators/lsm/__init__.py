"""The service lifecycle manager (issue 15): a service catalog (ServiceEntity), lifecycles
(Lifecycle, and the built-ins every namespace can use) and service instances (ServiceInstance)
that move through their lifecycle's states as clients create, update, delete and ask.

This is the pure core: the models (the schema of the three kinds), the checks that refuse a
broken Lifecycle or ServiceEntity naming the field, and the state machine engine. It does no
I/O; the kinds' pipelines, admission and the inventory HTTP API are built on it.

    outcome = advance(Context(...), status, Update(attributes, current_version=4))

The kinds the operator serves (`KINDS`: steps, admission, the App that realizes an instance) are in
`operators.lsm.kinds`. Every name here is imported on first use: the pure core does not pay for the
kinds, nor `stead service` for the models.
"""

from typing import TYPE_CHECKING

from operators.runtime import front_door

if TYPE_CHECKING:
    from operators.lsm.attributes import service_entity_problems
    from operators.lsm.builtin import BUILTINS
    from operators.lsm.kinds import KINDS
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


__getattr__, __dir__ = front_door(__name__, __file__, __all__)
