"""What the service lifecycle manager's models share: the kinds' resources, and the names and literals their
fields are typed with."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import StringConstraints, WithJsonSchema

from operators.runtime import Resource

LIFECYCLE = Resource("Lifecycle", "lifecycles")
CLUSTER_LIFECYCLE = Resource("ClusterLifecycle", "clusterlifecycles")
SERVICE_ENTITY = Resource("ServiceEntity", "serviceentities")
SERVICE_INSTANCE = Resource("ServiceInstance", "serviceinstances")

FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
# State names appear in API paths, CLI arguments and log lines: one word, no spaces.
StateName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
# Attribute names are keys of the inventory API (`<attribute>=<value>` as an instance id): identifiers.
AttributeName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
ConfigName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]

Label = Literal["success", "info", "warning", "danger"]
AttributeSet = Literal["candidate", "active", "rollback"]
ValidationSet = Literal["candidate", "active"]
Operation = Literal["clear candidate", "clear active", "clear rollback", "promote", "rollback"]
ModelState = Literal["inactive", "candidate", "designed", "active"]
AttributeType = Literal["string", "int", "float", "bool", "dict", "list"]
Modifier = Literal["r", "rw", "rw+"]
TriggerName = Literal["create", "auto", "api_set_state", "on_update", "on_delete", "resource_based", "expert",
                      "migrate"]
BuiltinName = Literal["simple", "service", "testing_basic_lifecycle"]
"""The lifecycles every namespace can use without creating them (`operators.lsm.builtin`)."""

OPERATIONS: tuple[Operation, ...] = ("clear candidate", "clear active", "clear rollback", "promote", "rollback")


