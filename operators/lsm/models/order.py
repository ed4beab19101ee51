"""The ServiceOrder kind: several instances created, updated or deleted in dependency order."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from operators.lsm.models.common import (
    FreeForm,
    ObjectName,
)
from operators.runtime import Model, PrinterColumn, Resource, StatusBase

# --- ServiceOrder --------------------------------------------------------------------------------

SERVICE_ORDER = Resource("ServiceOrder", "serviceorders")

# Item ids are what dependencies name and what status, Events and errors show: short identifiers.
ItemId = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
OrderAction = Literal["create", "update", "delete"]
ItemState = Literal["waiting", "in_progress", "completed", "failed", "skipped"]
FailureType = Literal["Refused", "Rejected", "Failed", "Gone", "DependencyFailed"]
OrderResult = Literal["in_progress", "completed", "failed", "partial"]


class OrderItem(Model):
    """One change of an order: create, update or delete one ServiceInstance of the order's namespace, once the
    items it depends on have completed (Inmanta's service order item)."""

    id: ItemId = Field(description="The item's id, unique in the order; what `dependencies` name.")
    action: OrderAction = Field(description="create, update or delete.")
    instance: ObjectName = Field(
        description="The ServiceInstance (its name, in the order's namespace: an order never reaches another)."
    )
    entity: ObjectName | None = Field(
        None, description="The ServiceEntity of the instance to create (create only; required there)."
    )
    attributes: FreeForm | None = Field(
        None, description="create: the client's attributes; update: the attributes to change (null removes one). "
        "Not with delete."
    )
    dependencies: list[ItemId] = Field(
        default_factory=list,
        description="Ids of items of this order that must complete before this one starts; if one fails, this "
        "one is skipped (DependencyFailed).",
    )


class ServiceOrderSpec(Model):
    """Several instance changes applied as one order, in dependency order. Immutable once accepted: a changed
    order would leave items half applied under a spec that no longer says them (send a new order instead)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "self == oldSelf",
        "message": "an order cannot change once accepted: create a new ServiceOrder",
    }]})

    description: str | None = Field(None, max_length=1024, description="What the order is for, for humans.")
    items: list[OrderItem] = Field(
        min_length=1, max_length=100,
        description="The items, by unique id.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
    )


class OrderItemStatus(Model):
    """Where one item is."""

    id: ItemId = Field(description="The item's id.")
    state: ItemState = Field(
        description="waiting (for its dependencies), in_progress (written; the instance is working), completed, "
        "failed or skipped (a dependency failed)."
    )
    failure_type: FailureType | None = Field(
        None, description="Why it failed or was skipped: Refused (the write was refused: the webhook's or the API "
        "server's answer), Rejected (the instance failed validation), Failed (its deployment or a request failed), "
        "Gone (the instance to update went), DependencyFailed (an item it depends on failed or was skipped)."
    )
    message: str | None = Field(None, description="What happened, for humans (the cause of a failure).")
    generation: int | None = Field(
        None, description="The instance's metadata.generation this item wrote: its outcome is read at it or later."
    )
    time: str | None = Field(None, description="When the item last changed state (RFC 3339).")


class ServiceOrderStatus(StatusBase):
    """Written by Stead."""

    result: OrderResult | None = Field(
        None, description="in_progress, completed (every item), failed (none) or partial (some completed, some "
        "failed or skipped)."
    )
    item_count: int | None = Field(None, description="How many items the order has.")
    completed_count: int | None = Field(None, description="How many completed.")
    items: list[OrderItemStatus] | None = Field(None, description="Each item's state, in the spec's order.")


SERVICE_ORDER_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Result", ".status.result", description="in_progress, completed, failed or partial."),
    PrinterColumn("Items", ".status.itemCount", type="integer", description="Items."),
    PrinterColumn("Completed", ".status.completedCount", type="integer", description="Items completed."),
)
