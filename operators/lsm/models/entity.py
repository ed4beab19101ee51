"""The ServiceEntity kind: attributes (embedded entities, relations), its lifecycle, how an instance is
realized, notifications, and its versions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator

from operators.lsm.models.common import (
    AttributeName,
    AttributeType,
    BuiltinName,
    ConfigName,
    FreeForm,
    Modifier,
    ObjectName,
    StateName,
)
from operators.runtime import Model, PrinterColumn, StatusBase

# --- ServiceEntity -------------------------------------------------------------------------------


class AttributeDefinition(Model):
    """One attribute of a service entity."""

    name: AttributeName = Field(description="The attribute's name, unique in the entity.")
    type: AttributeType = Field(description="string, int, float, bool, dict (a JSON object) or list.")
    modifier: Modifier = Field(
        "rw",
        description="r: set by Stead only (from what the App's tasks set), never by a client; rw (default): "
        "set by the client at creation, never changed after; rw+: set at creation and changed by updates "
        "where the lifecycle allows.",
    )
    optional: bool = Field(False, description="Whether the value may be absent or null.")
    default: Any = Field(None, description="The value an instance gets when its client gives none.")
    description: str | None = Field(None, description="What the attribute is, for humans.")
    embedded: EmbeddedEntity | None = Field(
        None,
        description="An embedded entity: the value is a nested object (type dict) or a list of them (type list), "
        "with attributes of its own, checked like the entity's (operators.lsm.embedded).",
    )


# --- Embedded entities ---------------------------------------------------------------------------

MAX_EMBEDDED_DEPTH = 3
"""How deep embedded entities may nest (an attribute's embedded entity is depth 1): a bound on what an
admission check and an update's merge walk, and on what a reader has to follow."""


class EmbeddedEntity(Model):
    """The nested definition of an embedded attribute: its attributes, the key that identifies an item in a
    list (an update matches items by it), and how many items a list holds."""

    description: str | None = Field(None, description="What an item is, for humans.")
    attributes: Annotated[
        list[AttributeDefinition],
        # Recursive (an item's attribute may embed again): the CRD keeps the items free-form, as a structural
        # schema cannot refer to itself; the webhook checks them against the model, naming the field.
        WithJsonSchema({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}),
    ] = Field(min_length=1, description="The item's attributes (name, type, modifier, optional, default, "
              "description, embedded), by unique name, as the entity's.")
    key: list[AttributeName] = Field(
        default_factory=list,
        description="The attributes that identify an item (required for a list): unique among the items, rw "
        "(never changed), required, of a scalar type. An update matches items by key.",
    )
    lower: int = Field(0, ge=0, description="A list's least number of items.")
    upper: int | None = Field(None, ge=1, description="A list's greatest number of items (unset: no bound).")


class LifecycleRef(Model):
    """Which lifecycle: a Lifecycle of the entity's namespace (`name`), a ClusterLifecycle (`cluster`), or a
    built-in one (`builtin`: the ClusterLifecycle Stead ships under that name, or the code's copy where it is
    not installed).

    Separate fields rather than one name looked up in several places, so that a team's own lifecycle never
    silently shadows a cluster-wide one, nor the reverse (as a RoleBinding says Role or ClusterRole).
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "(has(self.name) ? 1 : 0) + (has(self.cluster) ? 1 : 0) + (has(self.builtin) ? 1 : 0) == 1",
        "message": "exactly one of name (a Lifecycle of this namespace), cluster (a ClusterLifecycle) or "
                   "builtin (simple, service, testing_basic_lifecycle)",
    }]})

    name: ObjectName | None = Field(None, description="A Lifecycle in the entity's namespace.")
    cluster: ObjectName | None = Field(None, description="A ClusterLifecycle (cluster-wide, `kubectl get clc`).")
    builtin: BuiltinName | None = Field(
        None, description="A built-in lifecycle: simple, service or testing_basic_lifecycle (the ClusterLifecycle "
        "simple, service or testing-basic-lifecycle when installed, else Stead's own copy)."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> LifecycleRef:
        if sum(x is not None for x in (self.name, self.cluster, self.builtin)) != 1:
            raise ValueError("exactly one of name (a Lifecycle of this namespace), cluster (a ClusterLifecycle) "
                             "or builtin must be set")
        return self

    @property
    def key(self) -> str:
        """How status and messages name it: `builtin:simple`, `cluster:NAME` or the Lifecycle's name."""
        if self.builtin is not None:
            return f"builtin:{self.builtin}"
        return f"cluster:{self.cluster}" if self.cluster is not None else str(self.name)


class InputMapping(Model):
    """One App input taken from an attribute (of the active set)."""

    variable: AttributeName = Field(description="A runtime application variable of the Blueprint.")
    attribute: AttributeName = Field(
        description="The attribute whose value it takes (numbers and bools as text, dicts, lists and embedded "
        "entities as JSON)."
    )


class OutputMapping(Model):
    """One `r` attribute filled from a property the App's tasks set (an allocated address, an id)."""

    attribute: AttributeName = Field(description="The attribute (modifier r).")
    property_: ObjectName = Field(
        alias="property",
        description="The property's name: an application property, or with `deployment` a replica's "
        "property as the App shows it (Kind_Entity_name)."
    )
    deployment: str | None = Field(None, description="The deployment whose replica set the property.")
    replica: int = Field(0, ge=0, description="Which replica of the deployment (calm_array_index).")


class Realization(Model):
    """How an instance is realized: an App launched from a Blueprint, with inputs from the attributes."""

    blueprint: ObjectName = Field(description="The Blueprint (same namespace) the instance's App is launched from.")
    inputs: list[InputMapping] = Field(
        default_factory=list,
        description="The App's inputs, each from an attribute of the active set.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["variable"]},
    )
    outputs: list[OutputMapping] = Field(
        default_factory=list,
        description="The r attributes filled from the App's properties when it reaches its goal.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["attribute"]},
    )


# --- Relations -----------------------------------------------------------------------------------


class RelationDefinition(Model):
    """An inter-service relation (Inmanta's inter_service_relations): an attribute whose value names other
    ServiceInstances of one entity, in the instance's own namespace. With upperLimit 1 the value is one name
    (a string); otherwise a list of names. `operators.lsm.relations` holds its rules."""

    name: AttributeName = Field(description="The relation's name: an attribute of the instances, unique among the "
                                "entity's attributes and relations.")
    entity_type: ObjectName = Field(
        description="The ServiceEntity (same namespace) every instance the relation names must be of."
    )
    lower_limit: int = Field(1, ge=0, description="The fewest instances it names (0: the relation is optional).")
    upper_limit: int | None = Field(
        1, ge=1, description="The most instances it names; 1 (default): the value is one name; unset: no limit "
        "(the value is a list)."
    )
    modifier: Modifier = Field(
        "rw", description="As an attribute's: r (set by Stead only), rw (set at creation, never changed) or rw+ "
        "(changed by updates where the lifecycle allows)."
    )
    description: str | None = Field(None, description="What the relation is, for humans.")

    def as_attribute(self) -> AttributeDefinition:
        """The attribute its value is: one name (a string) or a list of names, required unless lowerLimit is 0."""
        return AttributeDefinition(name=self.name, type="string" if self.upper_limit == 1 else "list",
                                   modifier=self.modifier, optional=self.lower_limit == 0,
                                   description=self.description)


# --- Notifications ---------------------------------------------------------------------------------

NotificationType = Literal["transfer", "state", "failure"]
"""transfer: every executed transfer; state: a transfer that changed the state; failure: one that took its
error path (a failed validation or deployment)."""
NotificationLevel = Literal["info", "warning", "error"]
"""A state change is info, a transfer is info (warning when it took its error path), a failure is error."""
NOTIFICATION_TYPES: tuple[NotificationType, ...] = ("transfer", "state", "failure")


class Subscription(Model):
    """An HTTP endpoint that receives the entity's instances' events as CloudEvents (POST, one per event)."""

    name: ConfigName = Field(description="The subscription's name, unique in the entity (its status is under it).")
    url: str = Field(
        max_length=2048, pattern=r"^https?://[^/?#\s]+([/?][^\s]*)?$",
        description="Where events are POSTed (http or https). It obeys the egress rule of http tasks: public "
        "addresses only unless the operator allows a network (--http-allow-networks), ClusterIPs never. "
        "Credentials in it (user:password@, the query) are masked wherever it is shown.",
    )
    types: list[NotificationType] = Field(
        default_factory=lambda: list(NOTIFICATION_TYPES), min_length=1,
        description="The event types sent: transfer, state, failure (default: all).",
    )
    min_level: NotificationLevel = Field(
        "info", description="The least level sent: info (everything), warning or error (failures only)."
    )
    mode: Literal["binary", "structured"] = Field(
        "binary", description="The CloudEvents HTTP content mode: binary (ce-* headers, the data as the body) or "
        "structured (one application/cloudevents+json body).",
    )


class SubscriptionStatus(Model):
    """How delivery to one subscription goes (this operator replica's counts since it started)."""

    name: str = Field(description="The subscription.")
    url: str = Field(description="Its URL, credentials masked.")
    delivered: int = Field(0, description="Events the endpoint accepted (2xx).")
    last_delivered: str | None = Field(None, description="When the last one was accepted (RFC 3339).")
    pending: int = Field(0, description="Events queued or being sent.")
    retries: int = Field(0, description="Attempts that failed and were retried (with backoff).")
    failures: int = Field(0, description="Events given up: every attempt failed, or the egress rule refused it.")
    dropped: int = Field(0, description="Events dropped, oldest first, because the queue was full.")
    last_error: str | None = Field(None, description="The last failed attempt's error (credentials masked).")


class EntityShape(Model):
    """What one version of a service entity says: its attributes, its lifecycle and how an instance is
    realized. The spec's top-level fields are its current version; `spec.versions` holds the others."""

    description: str | None = Field(None, description="What the service is.")
    attributes: list[AttributeDefinition] = Field(
        default_factory=list,
        description="The attributes of its instances, by unique name.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    inter_service_relations: list[RelationDefinition] = Field(
        default_factory=list,
        description="Attributes that name other ServiceInstances of this namespace (by name), with arity and "
        "modifier; an instance is deployed only once every instance it names is up, and an instance still named "
        "by another cannot be deleted.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    identity: AttributeName | None = Field(
        None,
        description="The service identity: an rw, required, string or int attribute whose value is unique among "
        "the entity's instances and never changes; the API accepts `<attribute>=<value>` as an instance id.",
    )
    lifecycle: LifecycleRef = Field(description="The lifecycle its instances follow.")
    config: dict[str, bool] = Field(
        default_factory=dict,
        description="Switches of the lifecycle's auto transfers, by their configName: false switches that auto "
        "transfer off (the instance then waits for a state request); true or absent: on.",
    )
    realization: Realization | None = Field(
        None,
        description="How an instance is deployed. Absent: nothing is deployed, and resource-based transfers "
        "take their success path at once.",
    )
    notifications: list[Subscription] = Field(
        default_factory=list,
        description="Subscriptions: HTTP endpoints that receive the instances' transfers, state changes and "
        "failures as CloudEvents, filtered by type and level (docs/services.md#notifications).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


# --- Entity versions -----------------------------------------------------------------------------


class EntityVersion(EntityShape):
    """Another version of the entity (an older one its instances still use, or a newer one staged), kept
    whole: attributes, identity, lifecycle, config and realization of its own."""

    version: int = Field(ge=1, description="The version's number, unique in the entity and not spec.version.")


class Migration(Model):
    """How an instance moves to another entity version (with a change of spec.entityVersion): the state it
    lands in, and values for attributes the new version requires and gives no default for."""

    target_state: StateName = Field(description="The state of the new version's lifecycle the instance lands in "
                                    "(its auto transfers run from there).")
    attributes: FreeForm = Field(
        default_factory=dict,
        description="Values set in each attribute set (candidate, active, rollback) on the way: for an attribute "
        "the new version adds without a default, or one whose value must change to fit it.",
    )
    remove: list[AttributeName] = Field(
        default_factory=list, max_length=256,
        description="Attributes taken out of each attribute set on the way (ones the new version no longer has).",
    )
    current_version: int | None = Field(
        None, ge=1, description="The version the client saw (status.version); a stale one is refused (409)."
    )
    message: str | None = Field(None, max_length=1024, description="Why, for the log.")


class ServiceEntitySpec(EntityShape):
    """A service offered by the catalog: its attributes, its lifecycle and how an instance is realized (its
    current version), and the other versions its instances may use (`versions`)."""

    version: int | None = Field(
        None, ge=1, description="The number of the version the fields above describe: the current version, which "
        "new instances use unless they name another (absent: 1).",
    )
    versions: list[EntityVersion] = Field(
        default_factory=list,
        max_length=16,
        description="The entity's other versions, each whole (as a CRD's versions): instances on one of them stay "
        "there until migrated (spec.entityVersion with spec.migration). A version still in use cannot be removed.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["version"]},
    )

    @property
    def current_version(self) -> int:
        """The number of the top-level fields' version."""
        return self.version or 1


class ServiceEntityStatus(StatusBase):
    """Written by Stead."""

    lifecycle: str | None = Field(None, description="The lifecycle in force: its name, or builtin:<name>.")
    blueprint: str | None = Field(None, description="The Blueprint its instances are realized from.")
    attribute_count: int | None = Field(None, description="How many attributes the entity has.")
    auto_transfers_off: list[str] | None = Field(
        None, description="The config names of the auto transfers this entity switches off."
    )
    notifications: list[SubscriptionStatus] | None = Field(
        None, description="Per subscription: events delivered, pending, retried, failed and dropped, the last error."
    )
    version: int | None = Field(None, description="The current version (spec.version, 1 when absent).")
    versions: list[int] | None = Field(None, description="Every version the entity has, the current one included.")




SERVICE_ENTITY_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Lifecycle", ".status.lifecycle", description="The lifecycle in force."),
    PrinterColumn("Attributes", ".status.attributeCount", type="integer", description="Attributes."),
)
