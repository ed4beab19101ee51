"""The App kind (seed 000): an application launched from an Active Blueprint.

Launching is creating an App: the webhook checks its inputs against the blueprint's runtime
variables (types, mandatory ones, options, regexes); the pipeline then freezes a snapshot of the
blueprint in the App's status (the seed's "Blueprint-A_for_AppB": later edits of the blueprint do
not change a running app), creates the entities (one replica per `calm_array_index` of each
deployment) and runs the create action as an ActionRun named ``<app>-create``, which it waits for.

Pipeline: Init -> Launched (announced: state provisioning) -> Provisioned (the create run finished).

Who writes what in status: the App's pipeline writes the snapshot, the initial entities and the
state after create; ActionRuns write the lock, the current action, the state while and after they
run, the entities' properties and the last failure. Every App step carries the fields it does not
own forward, so that its final status write removes none of them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, time
from typing import Any, Literal

from pydantic import Field

from operators import API_VERSION
from operators.calm.models import BlueprintSpec
from operators.calm.workflow import layout
from operators.runtime.kinds import AdmissionRequest, Kind, Model, PrinterColumn, Refusal, StatusBase
from operators.runtime.kube import ApiError, custom_path
from operators.runtime.pipeline import PermanentError, Pipeline, StepContext, TemporaryError
from operators.runtime.ring import PROJECT_LABEL
from operators.runtime.store import object_key

AppState = Literal["provisioning", "running", "stopped", "starting", "stopping", "restarting", "deleting",
                   "deleted", "error"]
APP_LABEL = "stead.dev/app"
OWN_KEYS = frozenset({"phase", "observedGeneration", "conditions"})
FINAL_RUN_STATES = frozenset({"Succeeded", "Failed", "Aborted"})


class AppSpec(Model):
    """What the user asks for: which blueprint, with which inputs."""

    blueprint: str = Field(min_length=1, max_length=253, description="The Active Blueprint (same namespace).")
    inputs: dict[str, str] = Field(
        default_factory=dict,
        description="Values of the blueprint's runtime application variables, checked at apply time "
        "(type, options, regex; mandatory ones must be given unless they have a default).",
    )
    lock_ttl_seconds: int = Field(
        3600, ge=1, le=7 * 86400,
        description="How long an action may hold the app's lock; an older lock is released and its run failed.",
    )


class Lock(Model):
    """The app's lock while an action runs on it (seed: locked_by, locked_timestamp, ttl)."""

    locked_by: str = Field(description="The ActionRun holding the lock.")
    since: str = Field(description="When it was taken (RFC 3339).")
    ttl_seconds: int = Field(description="After this long the lock is released and the run failed.")


class Replica(Model):
    """One replica (one machine) of a deployment: every entity of the deployment runs on it."""

    index: int = Field(description="calm_array_index of the replica.")
    name: str = Field(description="The replica's name, the target of its tasks (e.g. app_tier-1).")
    state: str | None = Field(None, description="running, or error when a task failed on it.")
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="Properties set by tasks on this replica, namespaced as Kind_Entity_name (seed 000).",
    )


class DeploymentEntity(Model):
    name: str = Field(description="The deployment.")
    substrate: str = Field(description="Its substrate.")
    packages: list[str] = Field(default_factory=list, description="Its packages.")
    services: list[str] = Field(default_factory=list, description="Its services.")
    replicas: list[Replica] = Field(default_factory=list, description="Its replicas.")


class Entities(Model):
    """The live entities of the app, which later macros read."""

    deployments: list[DeploymentEntity] = Field(default_factory=list, description="Deployments and replicas.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Application properties set by tasks that run on no entity."
    )


class Failure(Model):
    """The last failed action: what failed, where, and why (Events expire; this stays)."""

    run: str = Field(description="The ActionRun.")
    action: str = Field(description="The action.")
    task: str | None = Field(None, description="The failing task and replica.")
    reason: str = Field(description="Why.")
    at: str = Field(description="When (RFC 3339).")


class AppStatus(StatusBase):
    state: AppState | None = Field(None, description="provisioning, running, stopped, starting, stopping, "
                                   "restarting, deleting, deleted or error.")
    blueprint: str | None = Field(None, description="The blueprint it was launched from.")
    snapshot: Any = Field(
        None, description="The frozen copy of the blueprint (name, uid, generation, spec, compiledState)."
    )
    entities: Entities | None = Field(None, description="Deployments, replicas and their properties.")
    lock: Lock | None = Field(None, description="Set while an action runs on the app.")
    current_action: str | None = Field(None, description="The action running now.")
    current_run: str | None = Field(None, description="The ActionRun running now.")
    last_run: str | None = Field(None, description="The last ActionRun that finished.")
    failure: Failure | None = Field(None, description="The last failure, kept until an action succeeds.")


COLUMNS = (
    PrinterColumn("Blueprint", ".spec.blueprint", description="The blueprint."),
    PrinterColumn("State", ".status.state", description="The app's state."),
    PrinterColumn("Action", ".status.currentAction", description="The action running now."),
)


# --- inputs ---------------------------------------------------------------------------------------


def _typed(kind: str, value: str) -> bool:
    try:
        if kind == "int":
            int(value)
        elif kind == "dict":
            return isinstance(json.loads(value), dict)
        elif kind == "date":
            date.fromisoformat(value)
        elif kind == "time":
            time.fromisoformat(value)
        elif kind == "datetime":
            datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def input_problems(spec: BlueprintSpec, inputs: Mapping[str, str], field: str = "spec.inputs") -> list[str]:
    """Each problem of the inputs against the blueprint's runtime application variables."""
    problems: list[str] = []
    variables = {v.name: v for v in spec.variables}
    for name, value in inputs.items():
        var = variables.get(name)
        if var is None or not var.runtime:
            known = ", ".join(sorted(v.name for v in spec.variables if v.runtime)) or "none"
            problems.append(f"{field}.{name}: not a runtime variable of the blueprint (runtime variables: {known})")
            continue
        if var.type == "secret":
            problems.append(f"{field}.{name}: a secret variable cannot be given as an input")
            continue
        if not _typed(var.type, value):
            problems.append(f"{field}.{name}: {value!r} is not a valid {var.type}")
        if var.options and value not in var.options:
            problems.append(f"{field}.{name}: {value!r} is not one of {', '.join(var.options)}")
        if var.regex:
            try:
                if not re.fullmatch(var.regex, value):
                    problems.append(f"{field}.{name}: {value!r} does not match {var.regex!r}")
            except re.error:
                problems.append(f"{field}.{name}: the blueprint's regex {var.regex!r} is invalid")
    for var in spec.variables:
        if var.runtime and var.mandatory and var.name not in inputs and not var.value:
            problems.append(f"{field}.{var.name}: required (a mandatory runtime variable without a default)")
    return problems


# --- helpers shared with ActionRun --------------------------------------------------------------


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def carry(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields a step passes on unchanged (everything the runtime does not compose)."""
    return {k: v for k, v in status.items() if k not in OWN_KEYS}


def lock_expired(lock: Mapping[str, Any], at: datetime | None = None) -> bool:
    try:
        since = datetime.strptime(str(lock.get("since")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return True
    return ((at or datetime.now(UTC)) - since).total_seconds() > int(lock.get("ttlSeconds") or 0)


def active_lock(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    lock = (status or {}).get("lock")
    if isinstance(lock, Mapping) and lock.get("lockedBy") and not lock_expired(lock):
        return lock
    return None


def initial_entities(spec: BlueprintSpec) -> dict[str, Any]:
    place = layout(spec)
    deployments = []
    for d in spec.deployments:
        replicas = [Replica(index=i, name=n) for i, n in enumerate(place.replicas[d.name])]
        deployments.append(DeploymentEntity(name=d.name, substrate=d.substrate, packages=list(d.packages),
                                            services=list(d.services), replicas=replicas))
    return Entities(deployments=deployments).model_dump(by_alias=True, mode="json")


# --- pipeline -------------------------------------------------------------------------------------


async def launch(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Launched: check, freeze the blueprint, create the entities (once: the snapshot is frozen)."""
    problems = KIND.check_spec(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems), facts={"state": "error"})
    status = carry(ctx.obj.status)
    if status.get("snapshot"):
        return status
    spec = AppSpec.model_validate(dict(ctx.obj.spec))
    record = ctx.services.store.get(object_key("Blueprint", ctx.obj.namespace, spec.blueprint))
    state = (record.status.get("state") if record is not None else None) or "missing"
    if record is None or state != "Active":
        raise TemporaryError("BlueprintNotActive", f"blueprint {spec.blueprint} is not Active (state: {state})",
                             delay=5.0, facts={**status, "state": "provisioning"})
    blueprint = BlueprintSpec.model_validate(dict(record.spec))
    problems = input_problems(blueprint, spec.inputs)
    if problems:
        raise PermanentError("InvalidInputs", "; ".join(problems), facts={**status, "state": "error"})
    snapshot = {"name": spec.blueprint, "uid": record.uid, "generation": record.generation,
                "spec": dict(record.spec), "compiledState": record.status.get("compiledState")}
    return {**status, "blueprint": spec.blueprint, "snapshot": snapshot,
            "entities": initial_entities(blueprint), "state": "provisioning"}


def create_run_name(app: str) -> str:
    return f"{app}-create"[:253]


async def create(ctx: StepContext) -> Mapping[str, Any]:
    """Launched -> Provisioned: run the create action (an ActionRun) and wait for it to finish."""
    status = carry(ctx.obj.status)
    if status.get("state") not in (None, "provisioning"):
        return status  # created before (or failed, and left for the user to act on)
    kube = ctx.services.kube
    name = create_run_name(ctx.obj.name)
    body = {
        "apiVersion": API_VERSION, "kind": "ActionRun",
        "metadata": {
            "name": name, "namespace": ctx.obj.namespace,
            "labels": {APP_LABEL: ctx.obj.name, **({PROJECT_LABEL: ctx.obj.labels[PROJECT_LABEL]}
                                                   if PROJECT_LABEL in ctx.obj.labels else {})},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "App", "name": ctx.obj.name,
                                 "uid": ctx.obj.uid}],
        },
        "spec": {"app": ctx.obj.name, "action": "create"},
    }
    try:
        await kube.request("POST", custom_path("actionruns", ctx.obj.namespace), body)
    except ApiError as error:
        if error.status != 409:
            raise TemporaryError("CreateRunNotStarted", f"ActionRun {name} not created: {error.message}") from None
    while True:
        run = await kube.request("GET", custom_path("actionruns", ctx.obj.namespace, name))
        run_status = run.get("status") or {}
        if run_status.get("state") in FINAL_RUN_STATES:
            break
        await asyncio.sleep(1.0)  # polling a GET: cheap, and survives an operator restart unchanged
    fresh = await kube.request("GET", custom_path("apps", ctx.obj.namespace, ctx.obj.name))
    status = carry(fresh.get("status") or {})
    if run_status["state"] != "Succeeded":
        reason = run_status.get("reason") or run_status.get("message") or run_status["state"]
        raise PermanentError("CreateFailed", f"create run {name} {run_status['state'].lower()}: {reason}",
                             facts={**status, "state": "error"})
    return {**status, "state": "running"}


async def admission(request: AdmissionRequest) -> None:
    """Inputs against the blueprint (when it is known); a locked app refuses spec writes (423)."""
    spec = AppSpec.model_validate(dict(request.spec))
    if request.operation == "UPDATE" and request.old is not None:
        old_spec = request.old.get("spec") or {}
        lock = active_lock(request.old.get("status"))
        if lock is not None and dict(old_spec) != dict(request.spec):
            raise Refusal(f"app {request.name} is locked by run {lock['lockedBy']}", code=423)
        if old_spec.get("blueprint") != spec.blueprint:
            raise Refusal("spec.blueprint: cannot change once the app is launched")
        snapshot = (request.old.get("status") or {}).get("snapshot")
        if snapshot:
            problems = input_problems(BlueprintSpec.model_validate(snapshot["spec"]), spec.inputs)
            if problems:
                raise Refusal("; ".join(problems))
            return
    services = request.services
    if services is None:
        return
    record = services.store.get(object_key("Blueprint", request.namespace, spec.blueprint))
    if record is None:
        return  # not compiled yet: the pipeline waits for it
    problems = input_problems(BlueprintSpec.model_validate(dict(record.spec)), spec.inputs)
    if problems:
        raise Refusal("; ".join(problems))


KIND = Kind(
    kind="App",
    plural="apps",
    short_names=("app",),
    description="An application launched from an Active Blueprint: a frozen snapshot of it, the user's "
    "inputs, the live entities, the lock and the state of its last actions.",
    spec_model=AppSpec,
    status_model=AppStatus,
    pipeline=Pipeline(
        phases=("Init", "Launched", "Provisioned"),
        steps={"Init": launch, "Launched": create},
        announce=frozenset({"Launched"}),
    ),
    columns=COLUMNS,
    admission=admission,
)
