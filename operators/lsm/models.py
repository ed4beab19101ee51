"""The Lifecycle, ServiceEntity and ServiceInstance kinds of the service lifecycle manager (issue 15).

These models are the schema: the CRDs are generated from them (`kubectl explain` shows the field
descriptions), and the pure checks (`operators.lsm.lifecycle`, `operators.lsm.attributes`) and the
state machine (`operators.lsm.machine`) read them. Field names follow Inmanta's LSM (states:
exportResources, validateSelf...; transfers: apiSetState, onUpdate, targetOperation...) in
camelCase, so that a lifecycle written for Inmanta translates field by field.

- A **Lifecycle** is a state machine: states, transfers between them, an initial state.
- A **ServiceEntity** is a catalog entry: typed attributes with modifiers, an optional identity,
  the lifecycle its instances follow, and how an instance is realized (a Blueprint, launched as
  an App with inputs taken from the attributes).
- A **ServiceInstance** is one service: the client's attributes in spec; the lifecycle's state,
  version and the three attribute sets (candidate, active, rollback) in status.

Attribute values are free-form JSON (string, number, bool, object, list), so the sets are typed
`FreeForm`: an object the API server keeps as written.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, WithJsonSchema, model_validator

from operators.runtime import Model, PrinterColumn, Resource, StatusBase

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


LIFECYCLE_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Initial", ".spec.initialState", description="The initial state."),
    PrinterColumn("States", ".status.stateCount", type="integer", description="States."),
    PrinterColumn("Transfers", ".status.transferCount", type="integer", description="Transfers."),
)
SERVICE_ENTITY_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Lifecycle", ".status.lifecycle", description="The lifecycle in force."),
    PrinterColumn("Attributes", ".status.attributeCount", type="integer", description="Attributes."),
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
