"""The Blueprint kind (docs/calm.md): a Calm application blueprint, as a Kubernetes object.

These models are the schema: the CRD is generated from them (`kubectl explain blueprint.spec`
shows the field descriptions), the admission webhook and the pipeline validate with them.
They use the names a Calm user knows (variables, credentials, substrates, packages, services,
deployments, actions, runbooks, tasks) in camelCase.

Two constraints of Kubernetes shape them:

- The schema must be *structural*: no unions of several types, no recursion. A runbook does
  not contain runbooks; a `callRunbook` task names one (`spec.runbooks`) or an entity's action.
  A task is one object whose type-specific fields are optional; which ones a type needs is
  checked by `operators.calm.validation`, which names the field.
- A secret value never stays in the object. `SecretSource` accepts an inline `value` once (the
  mutating webhook moves it into the vault and leaves a `vaultRef`); it is excluded from `repr`
  and no validation message quotes it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from operators.runtime import Model, PrinterColumn, Resource, SecretKeyRef, StatusBase

BLUEPRINT = Resource("Blueprint", "blueprints")
APP = Resource("App", "apps")
ACTIONRUN = Resource("ActionRun", "actionruns")

# Entity, credential and variable names are objects and attributes of macros (`@@{DB.url}@@`),
# so they are identifiers: a hyphen would read as a minus sign inside a macro.
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# Task and action names appear in task ids joined by "/" (`S1/install/configure`): no slash.
TaskName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")]
ActionName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
Uuid = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
]

SYSTEM_ACTIONS: tuple[str, ...] = ("create", "start", "stop", "restart", "delete")
"""The system actions, generated at compile time. An app-level action of one of these names in
`spec.actions` is a user edit of the generated one; in a service's `actions` it is the service's
part of that system action (what the service does when the application is created, started...)."""

ENTITY_KINDS: tuple[str, ...] = ("Substrate", "Deployment", "Package", "Service")
"""The blueprint entities, in the order of the macro context below the Application."""

VariableType = Literal["string", "int", "dict", "date", "time", "datetime", "multiline", "secret"]
TaskType = Literal["exec", "setvar", "http", "delay", "callRunbook"]
BlueprintState = Literal["Draft", "Compiled", "Active", "Inactive", "Error", "Deleted"]


# --- secrets -------------------------------------------------------------------------------------


SEALED_MAX = 1_500_000
"""base64 of a sealed value: the API server stores no object above ~1.5 MB anyway."""


class SecretSource(Model):
    """Where a secret value comes from: exactly one of `secretRef`, `value` or `vaultRef`.

    `secretRef` is the GitOps way (the value stays in a Kubernetes Secret). An inline `value` is
    accepted once: the mutating webhook stores it encrypted in the vault and replaces it with
    `vaultRef`. One object with optional fields rather than a union, because a CRD schema must be
    structural.

    The CRD refuses a `value` that is still there when the object is stored (an `x-kubernetes-
    validations` rule, checked by the API server after the mutating webhooks and with no webhook
    at all): with the webhook unreachable, ignored or switched off, an inline value is refused
    rather than kept in plain text.
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.value)",
        "message": "an inline secret value is accepted only through Stead's admission webhook, which moves it "
                   "into the vault; the webhook did not run (is the operator up?). Use secretRef, or retry",
        "fieldPath": ".value",
    }]})

    secret_ref: SecretKeyRef | None = Field(
        None, description="A Kubernetes Secret name and key holding the value (the GitOps way)."
    )
    value: str | None = Field(
        None,
        repr=False,
        description="The value, inline, write-only: the admission webhook moves it into the vault and "
        "replaces it with vaultRef. Never returned.",
    )
    vault_ref: Uuid | None = Field(None, description="The uuid of the value in Stead's vault (set by the webhook).")
    sealed: str | None = Field(
        None,
        max_length=SEALED_MAX,
        pattern=r"^[A-Za-z0-9+/]*={0,2}$",
        description="Set by the webhook beside vaultRef: the value encrypted (base64) for this namespace, uuid "
        "and blueprint under the operator's master key. The operator stores it in the vault once the object "
        "exists; admission itself writes nothing. Opens nowhere else.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        given = [n for n, v in (("secretRef", self.secret_ref), ("value", self.value), ("vaultRef", self.vault_ref))
                 if v is not None]
        if len(given) != 1:
            # Never quote the value: only which fields were given.
            got = ", ".join(given) or "none"
            raise ValueError(f"exactly one of secretRef, value, vaultRef must be set (got {got})")
        if self.sealed is not None and self.vault_ref is None:
            raise ValueError("sealed comes only with the vaultRef it was sealed for (the webhook sets both)")
        return self


class KnownHosts(Model):
    """The host keys an Existing substrate's machine may present: OpenSSH known_hosts text, from a
    Secret or inline (host keys are public). Exactly one of `secretRef` and `value`.

    A host key not listed fails the connection (and the task) with the key's fingerprint: Stead
    never accepts a host key on first use. `ssh-keyscan -p PORT ADDRESS` prints the lines, to be
    checked against the machine's own keys before they are trusted.
    """

    secret_ref: SecretKeyRef | None = Field(
        None, description="A Kubernetes Secret name and key holding the known_hosts text."
    )
    value: str | None = Field(
        None, min_length=1, description="The known_hosts text, inline (lines `[host]:port key-type key`)."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> KnownHosts:
        if (self.secret_ref is None) == (self.value is None):
            given = "both" if self.value is not None else "none"
            raise ValueError(f"exactly one of secretRef, value must be set (got {given})")
        return self


# --- variables and credentials -------------------------------------------------------------------


class Variable(Model):
    """A variable: an attribute of its entity (or of the application), usable in macros."""

    name: Identifier = Field(description="The variable's name, unique on its entity; `@@{Entity.name}@@` reads it.")
    type: VariableType = Field(
        "string",
        description="string, int, dict (a JSON object), date (YYYY-MM-DD), time (HH:MM[:SS]), datetime "
        "(ISO 8601), multiline or secret. A secret variable takes its value from `secret`.",
    )
    value: str | None = Field(
        None, description="The value (default at launch when `runtime`). Not for secret variables: use `secret`."
    )
    secret: SecretSource | None = Field(None, description="Only for type secret: where the value comes from.")
    label: str | None = Field(None, max_length=253, description="A short label shown at launch.")
    description: str | None = Field(None, description="What the variable is for.")
    runtime: bool = Field(False, description="Whether the user may set the value when launching an app.")
    mandatory: bool = Field(False, description="Whether a value is required (at launch, when `runtime`).")
    regex: str | None = Field(None, description="A regular expression the value must match in full.")
    options: list[str] = Field(default_factory=list, description="The allowed values (a choice); empty for any.")


class Credential(Model):
    """A credential; `@@{name.username}@@` and `@@{name.secret}@@` read it in tasks."""

    name: Identifier = Field(description="The credential's name, unique among the blueprint's names.")
    type: Literal["password", "key"] = Field(description="password, or key (an SSH private key).")
    username: str = Field(min_length=1, description="The user name.")
    secret: SecretSource = Field(description="The password or key: a Secret reference, once inline, or a vault uuid.")
    description: str | None = Field(None, description="What the credential is for.")


# --- runbooks ------------------------------------------------------------------------------------


class ResponseVariable(Model):
    """A variable an http task sets from its JSON response."""

    name: Identifier = Field(description="The variable set on the task's target.")
    path: str = Field(min_length=1, description="A dotted path into the JSON response, e.g. `data.id`.")


class HttpRequest(Model):
    """The request of an http task."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field("GET", description="The HTTP method.")
    url: str = Field(min_length=1, description="The URL; macros allowed.")
    headers: dict[str, str] = Field(default_factory=dict, description="Request headers; macros allowed in values.")
    body: str | None = Field(None, description="The request body; macros allowed.")
    expected_status: list[int] = Field(
        default_factory=list, description="Status codes counted as success; empty means any 2xx."
    )
    response_variables: list[ResponseVariable] = Field(
        default_factory=list, description="Variables set on the task's target from the JSON response."
    )
    credential: Identifier | None = Field(None, description="A credential for basic authentication.")


class Task(Model):
    """One task of a runbook. Which fields apply depends on `type`; the others must be absent."""

    name: TaskName = Field(description="The task's name, unique in its runbook; edges name it.")
    type: TaskType = Field(
        description="exec (run `script`), setvar (run `script`; its output lines name=value set `variables`), "
        "http (send `http`), delay (wait `delaySeconds`), callRunbook (run `runbook`, or `action` of `target`)."
    )
    description: str | None = Field(None, description="What the task does.")
    target: Identifier | None = Field(
        None,
        description="The entity (service, package, substrate or deployment) the task runs on; default: "
        "the entity whose action it is, or the runner for application actions.",
    )
    script: str | None = Field(None, description="exec and setvar: the script; macros `@@{...}@@` allowed.")
    script_type: Literal["shell", "python"] = Field("shell", description="exec and setvar: shell or python.")
    variables: list[Identifier] = Field(
        default_factory=list, description="setvar: the variables the script sets on the task's target."
    )
    http: HttpRequest | None = Field(None, description="http: the request.")
    delay_seconds: int | None = Field(None, ge=0, le=86400, description="delay: how long to wait.")
    runbook: Identifier | None = Field(None, description="callRunbook: the name of a runbook in spec.runbooks.")
    action: ActionName | None = Field(
        None, description="callRunbook: the name of an action of `target` to run (instead of `runbook`)."
    )
    retries: int = Field(0, ge=0, le=100, description="How many times to retry a failed task.")
    timeout_seconds: int | None = Field(None, ge=1, le=86400, description="Fail the task after this long.")


class Edge(Model):
    """An orchestration edge: `from` finishes before `to` starts."""

    from_: TaskName = Field(alias="from", description="The task that runs first.")
    to: TaskName = Field(description="The task that runs after it.")


class Runbook(Model):
    """Tasks and the edges between them (a DAG); tasks with no edge between them run in parallel."""

    description: str | None = Field(None, description="What the runbook does.")
    tasks: list[Task] = Field(default_factory=list, description="The tasks.")
    edges: list[Edge] = Field(default_factory=list, description="The orchestration edges between tasks.")


class NamedRunbook(Runbook):
    """A runbook that callRunbook tasks can call by name."""

    name: Identifier = Field(description="The runbook's name, unique in spec.runbooks.")


class Action(Runbook):
    """An action: a named runbook that runs on the application or on one entity."""

    name: ActionName = Field(
        description="The action's name. create, start, stop, restart and delete are system actions: in a "
        "service they are its part of that action; at application level, a user edit of the generated one."
    )


# --- entities ------------------------------------------------------------------------------------


class ReadinessCheck(Model):
    """How to tell a substrate is ready, retried until it passes or retries run out."""

    type: Literal["exec", "http"] = Field(description="exec (a script exits 0) or http (a URL answers 2xx).")
    script: str | None = Field(None, description="exec: the script; macros allowed.")
    script_type: Literal["shell", "python"] = Field("shell", description="exec: shell or python.")
    url: str | None = Field(None, description="http: the URL; macros allowed.")
    retries: int = Field(30, ge=0, le=1000, description="How many times to retry before the substrate fails.")
    timeout_seconds: int | None = Field(None, ge=1, le=86400, description="Time limit of one attempt.")


class Substrate(Model):
    """Where a deployment's replicas run."""

    name: Identifier = Field(description="The substrate's name, unique among the blueprint's names.")
    description: str | None = Field(None, description="What it is.")
    type: Literal["Local", "Kubernetes", "Existing"] = Field(
        description="Local (the runner itself), Kubernetes (`manifest` applied in the App's namespace by "
        "create, deleted by delete) or Existing (a machine at `address`, reached over SSH with `credential` "
        "and `knownHosts`: the tasks of its packages and services run there)."
    )
    manifest: str | None = Field(
        None, description="Kubernetes: a manifest template (YAML, one or more documents); macros allowed. Its "
        "objects are namespaced ones in the App's namespace (one naming another namespace, or a cluster-scoped "
        "kind, fails the run)."
    )
    address: str | None = Field(None, description="Existing: the machine's host name or IP address.")
    port: int | None = Field(None, ge=1, le=65535, description="Existing: the SSH port (default 22).")
    credential: Identifier | None = Field(
        None, description="Existing: the credential to log in with over SSH (a key credential: its username and "
        "private key)."
    )
    known_hosts: KnownHosts | None = Field(
        None, description="Existing: the machine's host keys (known_hosts text); required, a host key not "
        "listed fails the connection."
    )
    readiness: ReadinessCheck | None = Field(None, description="How to tell the substrate is ready.")
    variables: list[Variable] = Field(default_factory=list, description="The substrate's variables.")
    pre_create: Runbook | None = Field(None, description="Tasks run before the substrate is created.")
    post_create: Runbook | None = Field(None, description="Tasks run once the substrate is created and ready.")
    post_delete: Runbook | None = Field(None, description="Tasks run after the substrate is deleted.")


class Package(Model):
    """What installs and uninstalls software on a deployment's substrate."""

    name: Identifier = Field(description="The package's name, unique among the blueprint's names.")
    description: str | None = Field(None, description="What it installs.")
    variables: list[Variable] = Field(default_factory=list, description="The package's variables.")
    install: Runbook | None = Field(None, description="Run by the create action.")
    uninstall: Runbook | None = Field(None, description="Run by the delete action.")


class Service(Model):
    """A logical unit of the application (a database, an app server, a load balancer)."""

    name: Identifier = Field(description="The service's name, unique among the blueprint's names.")
    description: str | None = Field(None, description="What the service is.")
    depends_on: list[Identifier] = Field(
        default_factory=list,
        description="Entities (usually services) this service is created and started after, and stopped "
        "and deleted before. System actions only.",
    )
    variables: list[Variable] = Field(default_factory=list, description="The service's variables.")
    actions: list[Action] = Field(
        default_factory=list,
        description="The service's actions: create, start, stop, restart and delete are its part of those "
        "system actions; any other name is a user action run on this service alone.",
    )


class Deployment(Model):
    """A group of replicas: one substrate each, with packages and services on it."""

    name: Identifier = Field(description="The deployment's name, unique among the blueprint's names.")
    description: str | None = Field(None, description="What the deployment is.")
    substrate: Identifier = Field(description="The substrate the replicas run on (used by no other deployment).")
    packages: list[Identifier] = Field(default_factory=list, description="The packages installed on each replica.")
    services: list[Identifier] = Field(default_factory=list, description="The services each replica runs.")
    depends_on: list[Identifier] = Field(
        default_factory=list, description="Entities this deployment is created after (system actions only)."
    )
    min_replicas: int | None = Field(None, ge=0, le=1000, description="The fewest replicas (default 1).")
    default_replicas: int | None = Field(None, ge=0, le=1000, description="Replicas at launch (default minReplicas).")
    max_replicas: int | None = Field(None, ge=1, le=1000, description="The most replicas (default defaultReplicas).")

    @property
    def replicas(self) -> tuple[int, int, int]:
        """(min, default, max) with the defaults applied."""
        low = 1 if self.min_replicas is None else self.min_replicas
        default = low if self.default_replicas is None else self.default_replicas
        high = max(default, 1) if self.max_replicas is None else self.max_replicas
        return low, default, high


class BlueprintSpec(Model):
    """A Calm application blueprint: compile it, then launch Apps from it when it is Active."""

    description: str | None = Field(None, description="What the application is.")
    active: bool | None = Field(
        None,
        description="true: a Compiled blueprint becomes Active (apps may be launched from it); false: Inactive; "
        "unset: it stays Compiled.",
    )
    variables: list[Variable] = Field(default_factory=list, description="Application variables.")
    credentials: list[Credential] = Field(default_factory=list, description="Credentials used by tasks and substrates.")
    substrates: list[Substrate] = Field(default_factory=list, description="Where deployments run.")
    packages: list[Package] = Field(default_factory=list, description="Software installed on substrates.")
    services: list[Service] = Field(default_factory=list, description="The application's services.")
    deployments: list[Deployment] = Field(
        default_factory=list, description="Each places a substrate, packages and services, with replica counts."
    )
    actions: list[Action] = Field(
        default_factory=list,
        description="Application-level user actions; one named create, start, stop, restart or delete replaces "
        "that generated action (copy it from status.actions, then edit).",
    )
    runbooks: list[NamedRunbook] = Field(
        default_factory=list, description="Runbooks that callRunbook tasks call by name."
    )


# --- status --------------------------------------------------------------------------------------


class DependencyEntry(Model):
    """One dependency of the system actions, as shown to the user (the topology view).

    Calm's dependency_list fields. For an implicit dependency the getter reads the setter's
    attribute through a macro; for an explicit or inherent one the getter is the dependent entity
    and the setter the entity it depends on, with no attribute.
    """

    type: Literal["inherent", "explicit", "implicit"] = Field(
        description="inherent (substrate, packages, services of a deployment), explicit (dependsOn) or "
        "implicit (a task reads a macro another task of the action sets)."
    )
    getter_resource_kind: str = Field(description="Kind of the dependent entity (Substrate, Package, Service...).")
    getter_resource_name: str = Field(description="Name of the dependent entity.")
    setter_resource_kind: str = Field(description="Kind of the entity depended on.")
    setter_resource_name: str = Field(description="Name of the entity depended on.")
    setter_resource_attr: str | None = Field(None, description="implicit: the attribute the getter reads.")
    action_resource_kind: str | None = Field(None, description="implicit: kind of the action's owner (Application).")
    action_resource_name: str | None = Field(None, description="implicit: the action's owner, if not the application.")
    action_name: str | None = Field(
        None,
        description="implicit: the action it was found in; explicit and inherent ones hold for all system actions.",
    )
    getter_task: str | None = Field(None, description="implicit: the id of the task that reads the attribute.")
    setter_task: str | None = Field(None, description="implicit: the id of the task that sets it.")
    source: str | None = Field(None, description="The spec field this dependency comes from.")


class CompiledEdge(Model):
    """An orchestration edge between two tasks with the same parent."""

    from_: str = Field(alias="from", description="Id of the task that runs first.")
    to: str = Field(description="Id of the task that runs after it.")
    reason: Literal["inherent", "explicit", "implicit", "spec", "user"] = Field(
        description="Where the edge comes from: inherent or explicit dependencies, an implicit (macro) "
        "dependency, the runbook's own edges (spec) or a user edit of the action (user)."
    )


class CompiledTask(Model):
    """One task of a compiled action. Nested runbooks are flattened: a task names its parent."""

    id: str = Field(description='The task\'s id in the action: the path of names from the top, e.g. "S1/install/t".')
    name: str = Field(description="The task's name.")
    parent: str | None = Field(None, description="Id of the callRunbook task this task runs under; none at the top.")
    type: str = Field(
        description="exec, setvar, http, delay or callRunbook, or a step the compiler generates: kubernetes "
        "(apply or delete a substrate's manifest) or ssh (reach an existing machine)."
    )
    target: str | None = Field(None, description="The entity the task runs on; none for the runner.")
    target_kind: str | None = Field(None, description="The target's kind.")
    calls: str | None = Field(None, description='callRunbook: what it runs, e.g. "Service/S1/create" or "Runbook/x".')
    source: str = Field(description="The spec field that defines the task (scripts are read from there).")
    retries: int = Field(0, description="Retries.")
    timeout_seconds: int | None = Field(None, description="Time limit.")
    runtime_macros: list[str] = Field(
        default_factory=list,
        description="Macros kept for run time (a task of this action sets them, or they are secrets); "
        "every other macro of the task is resolved before the run.",
    )


class CompiledAction(Model):
    """One compiled action: its tasks (flattened) and edges, and whether the system or a user made it."""

    name: str = Field(description="The action's name.")
    level: Literal["Application", "Service"] = Field(description="Application, or Service for a service's own action.")
    owner: str | None = Field(None, description="The service of a service-level action.")
    system: bool = Field(description="Whether it is a system action (create, start, stop, restart, delete).")
    system_generated: bool = Field(description="A system action as the compiler generated it.")
    user_edited: bool = Field(
        description="A system action edited by the user (or rebuilt from an edited create); kept until "
        "the dependency list changes."
    )
    task_count: int = Field(0, description="How many tasks the action has (nested ones included).")
    edge_count: int = Field(0, description="How many orchestration edges it has.")
    tasks: list[CompiledTask] = Field(
        default_factory=list,
        description="The tasks, parents before children (left out when status.actionsTruncated is true).",
    )
    edges: list[CompiledEdge] = Field(
        default_factory=list, description="The orchestration edges (left out when status.actionsTruncated is true)."
    )


class EditRecord(Model):
    """A user edit of a system action seen by a compile: its digest and whether it was kept."""

    action: str = Field(description="The system action's name.")
    digest: str = Field(description="SHA-256 of the edit as written in spec.actions.")
    accepted: bool = Field(
        description="true: in force; false: discarded because the dependency list changed (edit it again to "
        "apply it)."
    )


class CompiledState(Model):
    """What the next compile compares against to apply Calm's rules for user-edited actions."""

    dependency_digest: str = Field(description="SHA-256 of the dependency list.")
    edits: list[EditRecord] = Field(default_factory=list, description="The user edits of system actions.")


class BlueprintStatus(StatusBase):
    """Written by Stead."""

    state: BlueprintState | None = Field(
        None, description="Draft, Compiled, Active (apps may be launched), Inactive, Error or Deleted."
    )
    errors: list[str] = Field(
        default_factory=list, description="Compile errors, each naming its field, task, macro or cycle."
    )
    warnings: list[str] = Field(default_factory=list, description="Compile warnings (the blueprint still compiles).")
    dependency_list: list[DependencyEntry] = Field(
        default_factory=list, description="The dependencies of the system actions (for the topology view)."
    )
    actions: list[CompiledAction] = Field(default_factory=list, description="The compiled actions.")
    service_count: int | None = Field(None, description="How many services the blueprint has.")
    action_count: int | None = Field(None, description="How many compiled actions it has.")
    task_count: int | None = Field(None, description="How many tasks its compiled actions have in all.")
    actions_truncated: bool | None = Field(
        None,
        description="true: the compiled actions were too large for a status (etcd limits an object's size), so "
        "their tasks and edges are left out here; the operator keeps them whole.",
    )
    compiled_state: CompiledState | None = Field(
        None, description="What the next compile compares against (dependency list digest, user edits)."
    )


PRINTER_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("State", ".status.state", description="Draft, Compiled, Active, Inactive, Error or Deleted."),
    PrinterColumn("Services", ".status.serviceCount", type="integer", description="Services."),
    PrinterColumn("Actions", ".status.actionCount", type="integer", description="Compiled actions."),
)
"""The kind's own printer columns (the runtime adds Phase, Ready and Age)."""
