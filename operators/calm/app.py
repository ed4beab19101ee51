"""The App kind (docs/calm.md): an application launched from an Active Blueprint.

Launching is creating an App: the webhook checks its inputs against the blueprint's runtime
variables (types, mandatory ones, options, regexes); the pipeline then freezes a snapshot of the
blueprint in the App's status (Calm's "Blueprint-A_for_AppB": later edits of the blueprint do
not change a running app), creates the entities (one replica per `calm_array_index` of each
deployment) and runs the create action as an ActionRun named ``<app>-create``, which it waits for.

Pipeline: Init -> Launched -> Provisioned (the create run finished). The first write of a launch
records the snapshot, state provisioning and the app's lock, already held for the create run, so
that no other run can slip in before it; the create step then starts the run and is called again
(a TemporaryError with an explicit short delay and an unchanged status: no write, no Event) until the
run ends, instead of holding the App's reconciliation for the whole run. A launch costs three App
status PATCHes: this one, the create run's release, and Provisioned.

Deleting an App runs its delete action first (the `stead.dev/cleanup` finalizer holds the object
meanwhile): an ActionRun named ``<app>-delete-<generation>`` (not owned by the App: it is the record
of the deletion and outlives it, and a foreground deletion cannot collect it half-way). A run still
holding the lock is waited for. A failed delete action leaves the App in phase Deleting, Stalled,
with the failing task and the reason, state error. Then either set ``spec.softDelete: true``
(Calm's soft delete: the app goes without running its delete action), or fix its inputs (a new
generation runs the delete action again), or remove the finalizer by hand. An App that was never
launched, was soft-deleted or whose delete action already ran goes at once; so does one whose
namespace is being deleted (nothing can be created in it any more), with a Warning Event on the
Namespace that says its delete action was not run (`_skipped_in_deleted_namespace`).

Who writes what in status: the App's pipeline writes the snapshot, the initial entities and the
state after create; ActionRuns write the lock, the current action, the state while and after they
run, the entities' properties and the last failure. Every App step carries the fields it does not
own forward, so that its final status write removes none of them.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field

from operators import API_VERSION
from operators.calm.blueprint import KIND as BLUEPRINT_KIND
from operators.calm.models import ACTIONRUN, APP, BLUEPRINT, BlueprintSpec
from operators.calm.names import APP_SHORT_NAMES
from operators.calm.validation import type_problem
from operators.calm.workflow import layout
from operators.runtime import (
    FINAL_RUN_STATES,
    PROJECT_LABEL,
    RUNTIME_FIELDS,
    AdmissionRequest,
    ApiError,
    Kind,
    Model,
    Objects,
    Observed,
    PermanentError,
    Pipeline,
    PrinterColumn,
    Refusal,
    Requester,
    StatusBase,
    StepContext,
    TemporaryError,
    object_key,
    spec_admission,
    spec_step,
    utc_now,
)
from operators.runtime import conditions as cond

AppState = Literal["provisioning", "running", "stopped", "starting", "stopping", "restarting", "deleting",
                   "deleted", "error"]
APP_LABEL = "stead.dev/app"
APP_UID_LABEL = "stead.dev/app-uid"

log = logging.getLogger(__name__)


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
    soft_delete: bool = Field(
        False,
        description="true: deleting the app does not run its delete action (Calm's soft delete), e.g. for an "
        "app whose delete action fails or whose resources are gone already.",
    )


class Lock(Model):
    """The app's lock while an action runs on it (Calm's locked_by, locked_timestamp, ttl)."""

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
        description="Properties set by tasks on this replica, namespaced as Kind_Entity_name.",
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
    resting_state: Literal["running", "stopped"] | None = Field(
        None, description="Where the app rests between actions: the state its last successful action led to "
        "(stop: stopped; create, start, restart: running). An action that neither starts nor stops the app "
        "(update) ends here when it succeeds, whatever failed before it (error is not kept).")
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
        problem = type_problem(var.type, value)
        if problem is not None:
            problems.append(f"{field}.{name}: {value!r}: {problem}")
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


def carry(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields a step passes on unchanged (everything the runtime does not compose)."""
    return {k: v for k, v in status.items() if k not in RUNTIME_FIELDS}


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


@spec_step(AppSpec)
async def launch(ctx: StepContext[AppSpec]) -> Mapping[str, Any]:
    """Init -> Launched: check, freeze the blueprint, create the entities (once: the snapshot is frozen)."""
    problems = KIND.check_spec(ctx.obj.spec, ctx.parsed_spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems), facts={"state": "error"})
    status = carry(ctx.obj.status)
    if status.get("snapshot"):
        return status
    spec = ctx.spec
    record = ctx.services.store.get(object_key(BLUEPRINT.kind, ctx.obj.namespace, spec.blueprint))
    if record is None or record.status.get("state") != "Active":
        raise await _blueprint_unavailable(ctx, spec.blueprint, {**status, "state": "provisioning"})
    blueprint = BLUEPRINT_KIND.parse(record.spec)
    problems = input_problems(blueprint, spec.inputs)
    if problems:
        raise PermanentError("InvalidInputs", "; ".join(problems), facts={**status, "state": "error"})
    snapshot = {"name": spec.blueprint, "uid": record.uid, "generation": record.generation,
                "spec": dict(record.spec), "compiledState": record.status.get("compiledState")}
    run = create_run_name(ctx.obj.name)
    lock = {"lockedBy": run, "since": utc_now(), "ttlSeconds": spec.lock_ttl_seconds}
    return {**status, "blueprint": spec.blueprint, "snapshot": snapshot,
            "entities": initial_entities(blueprint), "state": "provisioning",
            "lock": lock, "currentAction": "create", "currentRun": run}


async def _blueprint_unavailable(ctx: StepContext, name: str, facts: Mapping[str, Any]
                                 ) -> PermanentError | TemporaryError:
    """Why an App cannot launch yet. Neither case is retried on a timer: the App depends on its
    Blueprint (`KIND.depends_on`), so it is checked again when that Blueprint becomes Ready.

    Absent: Stalled, naming the blueprints that do exist (a typo is the likely cause). Present but
    not Active (still compiling, or its compile failed): waiting, with the blueprint's own reason.
    """
    namespace = ctx.obj.namespace
    try:
        body = await Objects(ctx.services.kube).get(BLUEPRINT, namespace, name)
    except ApiError as error:
        if error.status != 404:
            return TemporaryError("BlueprintNotRead", f"blueprint {name} not read: {error.message}", facts=facts)
        prefix = object_key(BLUEPRINT.kind, namespace, "")
        known = sorted(key.removeprefix(prefix) for key, _ in ctx.services.store.items(BLUEPRINT.kind)
                       if key.startswith(prefix))
        return PermanentError("BlueprintNotFound", f"spec.blueprint: no Blueprint {name!r} in namespace "
                              f"{namespace} (Active blueprints here: {', '.join(known) or 'none'}); the App "
                              "launches when it appears", facts=facts)
    blueprint = body.get("status") or {}
    why = blueprint_reason(blueprint)
    return TemporaryError("BlueprintNotActive", f"blueprint {name} is not Active yet (state: "
                          f"{blueprint.get('state') or 'none'}{f': {why}' if why else ''}); the App launches when "
                          "it is", facts=facts, waiting=True, delay=BLUEPRINT_RECHECK_SECONDS)


BLUEPRINT_RECHECK_SECONDS = 60.0
"""A slow safety net only: the App is re-checked when its Blueprint becomes Ready."""


def blueprint_reason(status: Mapping[str, Any]) -> str:
    """The message of the blueprint's Stalled=True or Ready=False condition, if any."""
    conditions = status.get("conditions") or []
    for type_, bad in ((cond.STALLED, "True"), (cond.READY, "False")):
        condition = cond.find(conditions, type_)
        if condition is not None and condition.get("status") == bad:
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


def create_run_name(app: str) -> str:
    return f"{app}-create"[:253]


CREATE_RUNNING = "CreateRunning"
POLL_SECONDS = 1.0


def run_body(obj: Observed, name: str, action: str, owned: bool) -> dict[str, Any]:
    """An ActionRun the App starts itself (its create and delete runs)."""
    labels = {APP_LABEL: obj.name, APP_UID_LABEL: obj.uid,
              **({PROJECT_LABEL: obj.labels[PROJECT_LABEL]} if PROJECT_LABEL in obj.labels else {})}
    metadata: dict[str, Any] = {"name": name, "namespace": obj.namespace, "labels": labels}
    if owned:
        metadata["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "App", "name": obj.name, "uid": obj.uid}]
    return {"apiVersion": API_VERSION, "kind": "ActionRun", "metadata": metadata,
            "spec": {"app": obj.name, "action": action}}


async def get_run(kube: Requester, namespace: str, name: str) -> dict[str, Any] | None:
    return await Objects(kube).find(ACTIONRUN, namespace, name)


async def create(ctx: StepContext) -> Mapping[str, Any]:
    """Launched -> Provisioned: start the create action (an ActionRun) and come back until it ended."""
    status = {**carry(ctx.obj.status), **ctx.facts}
    name = create_run_name(ctx.obj.name)
    if status.get("state") not in (None, "provisioning"):
        failed = create_failure(status, name)
        if failed is not None:  # the run recorded its failure in the App before this step saw the run end
            raise PermanentError("CreateFailed", failed, facts=status)
        return status  # created before (or an action since the create failed, and left for the user to act on)
    running = TemporaryError(CREATE_RUNNING, f"running the create action: ActionRun {name}", delay=POLL_SECONDS,
                             facts=status, waiting=True)
    if not ctx.obj.status.get("snapshot"):
        running.delay = 0.1  # the run reads the snapshot from the App: write it (and the lock) first
        raise running
    kube = ctx.services.kube
    run = await get_run(kube, ctx.obj.namespace, name)
    if run is None:
        try:
            await Objects(kube).create(ACTIONRUN, ctx.obj.namespace, run_body(ctx.obj, name, "create", owned=True))
        except ApiError as error:
            if error.status != 409:
                # a server-side failure (a webhook that timed out under a burst) is retried soon,
                # not after an exponential backoff grown to minutes
                raise TemporaryError("CreateRunNotStarted", f"ActionRun {name} not created: {error.message}",
                                     facts=status, delay=POLL_SECONDS * 2 if error.status >= 500 else None) from None
        raise running
    run_status = run.get("status") or {}
    if run_status.get("state") not in FINAL_RUN_STATES:
        raise running  # polling a GET once a second: cheap, and survives an operator restart unchanged
    fresh = await Objects(kube).get(APP, ctx.obj.namespace, ctx.obj.name)
    status = carry(fresh.get("status") or {})
    if run_status["state"] != "Succeeded":
        raise PermanentError("CreateFailed", f"create run {name} {run_status['state'].lower()}: {_why(run_status)}",
                             facts={**status, "state": "error"})
    return {**status, "state": "running"}


def create_failure(status: Mapping[str, Any], run_name: str) -> str | None:
    """Why the App is not created, when its create run failed and nothing succeeded since (else None).

    A failed create run records the failure in the App itself (status.failure, state error), and may
    do so before the App's create step sees the run end: the App must then stall on the failure too
    (Stalled CreateFailed, what GitOps tools show), never count as provisioned, as when this step sees the
    run fail itself. A later action that succeeded clears `status.failure`, so this step no longer stalls the
    App on it."""
    failure = status.get("failure") or {}
    if status.get("state") != "error" or failure.get("run") != run_name:
        return None
    return f"create run {run_name} failed: {_why({**failure, 'failedTask': failure.get('task')})}"


def _why(run_status: Mapping[str, Any]) -> str:
    reason = str(run_status.get("reason") or run_status.get("message") or run_status.get("state"))
    task = run_status.get("failedTask")
    return f"{task}: {reason}" if task and not reason.startswith(f"{task}:") else reason


# --- deletion -------------------------------------------------------------------------------------


def delete_run_name(app: str, generation: int) -> str:
    suffix = f"-delete-{generation}"
    return app[:253 - len(suffix)] + suffix


async def run_holder_gone(kube: Requester, namespace: str, lock: Mapping[str, Any]) -> bool:
    """Whether the run holding a lock was deleted (its lock is then stale: nothing will release it)."""
    return await get_run(kube, namespace, str(lock.get("lockedBy"))) is None


@spec_step(AppSpec)
async def delete(ctx: StepContext[AppSpec]) -> Mapping[str, Any]:
    """The App's cleanup: run its delete action before it goes (or let it go when there is none to run)."""
    obj, kube = ctx.obj, ctx.services.kube
    status = carry(obj.status)
    spec = ctx.spec
    if spec.soft_delete or not status.get("snapshot") or status.get("state") == "deleted":
        return {}
    name = delete_run_name(obj.name, obj.generation)
    lock = active_lock(status)
    if lock is not None and lock.get("lockedBy") != name and not await run_holder_gone(kube, obj.namespace, lock):
        raise TemporaryError("WaitingForRun", f"the delete action waits for run {lock['lockedBy']} to end",
                             delay=2.0, facts=status, waiting=True)
    running = TemporaryError("DeleteRunning", f"running the delete action: ActionRun {name}", delay=POLL_SECONDS,
                             facts=status, waiting=True)
    run = await get_run(kube, obj.namespace, name)
    if run is not None and (run.get("metadata") or {}).get("labels", {}).get(APP_UID_LABEL) != obj.uid:
        run_spec = run.get("spec") or {}
        if run_spec.get("app") != obj.name or run_spec.get("action") != "delete":
            raise PermanentError("DeleteRunConflict", f"ActionRun {name} exists and is not this app's delete run",
                                 facts=status)
        # the record of an earlier app of the same name: make room for this one's
        with contextlib.suppress(ApiError):
            await Objects(kube).delete(ACTIONRUN, obj.namespace, name)
        running.delay = 0.5
        raise running
    if run is None:
        try:
            await Objects(kube).create(ACTIONRUN, obj.namespace, run_body(obj, name, "delete", owned=False))
        except ApiError as error:
            if error.status == 403 and "terminat" in error.message:
                await _skipped_in_deleted_namespace(ctx)
                return {}
            if error.status != 409:
                raise TemporaryError("DeleteRunNotStarted", f"ActionRun {name} not created: {error.message}",
                                     facts=status) from None
        raise running
    run_status = run.get("status") or {}
    if run_status.get("state") not in FINAL_RUN_STATES:
        raise running
    if run_status["state"] == "Succeeded":
        return {}
    fresh = await Objects(kube).get(APP, obj.namespace, obj.name)
    raise PermanentError(
        "DeleteFailed",
        f"delete run {name} {run_status['state'].lower()}: {_why(run_status)} (spec.softDelete: true lets the "
        "app go without it)",
        facts={**carry(fresh.get("status") or {}), "state": "error"},
    )


DELETE_ACTION_SKIPPED = "AppDeleteActionSkipped"


async def _skipped_in_deleted_namespace(ctx: StepContext) -> None:
    """An App whose namespace is being deleted goes without its delete action: say so where it stays
    visible. Not an Event on the App: its namespace takes no new object, Events included (and the App
    goes within seconds); a Warning Event on the Namespace, which the API server keeps in namespace
    `default` (`kubectl get events -n default --field-selector involvedObject.kind=Namespace`).

    Why the action is not run there: nothing can be created in such a namespace (no ActionRun to
    record the run, no Job for its scripts, no token of its service account), and the namespace
    controller deletes its Secrets, service account and Roles meanwhile, so a run would fail half-way
    at random. Delete the Apps first (`kubectl delete apps --all -n NS --wait`) to run their delete
    actions, then the namespace (docs/calm.md)."""
    obj = ctx.obj
    uid = ""
    with contextlib.suppress(ApiError):  # the Event is kept without the uid if the namespace may not be read
        found = await ctx.services.kube.request("GET", f"/api/v1/namespaces/{obj.namespace}")
        uid = str((found.get("metadata") or {}).get("uid") or "")
    namespace = Observed(kind="Namespace", namespace="", name=obj.namespace, uid=uid, generation=0, labels={},
                         spec={}, status={})
    message = (f"app {obj.name}: its delete action was not run, as namespace {obj.namespace} is being deleted "
               "(nothing can be created in it, its Secrets and service account are going); delete Apps before "
               "their namespace to run their delete actions")
    log.warning("%s", message)
    ctx.services.events.record(namespace, "Warning", DELETE_ACTION_SKIPPED, message)


@spec_admission(AppSpec)
async def admission(request: AdmissionRequest[AppSpec]) -> None:
    """Inputs against the blueprint (when it is known); a locked app refuses spec writes (423)."""
    spec = request.parsed
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
    problems = input_problems(BLUEPRINT_KIND.parse(record.spec), spec.inputs)
    if problems:
        raise Refusal("; ".join(problems))


KIND = Kind(
    kind=APP.kind,
    plural=APP.plural,
    short_names=APP_SHORT_NAMES,
    description="An application launched from an Active Blueprint: a frozen snapshot of it, the user's "
    "inputs, the live entities, the lock and the state of its last actions.",
    spec_model=AppSpec,
    status_model=AppStatus,
    pipeline=Pipeline(
        phases=("Init", "Launched", "Provisioned"),
        steps={"Init": launch, "Launched": create},
        # not announced: the launch write already carries the lock of the create run, so an
        # announcement would only add a PATCH of its own
    ),
    columns=COLUMNS,
    admission=admission,
    cleanup=delete,
    depends_on={BLUEPRINT.kind: lambda spec, name: spec.get("blueprint") == name},
)
