"""The ServiceInstance kind's work: admission, the pipeline, deletion, and the App that realizes it.

What moves an instance is a *trigger*, and the state machine (`operators.lsm.machine.advance`)
decides what it does. The kind turns what happens to the object into triggers:

- creation: the first reconcile of an instance with no state;
- `spec.stateRequest` (api_set_state): a request not taken in yet (`pending_request`); it is
  recorded in `status.stateRequest` even when refused, so each one is handled once;
- a change of `spec.attributes` (on_update): the whole client set, compared with
  `status.clientAttributes`; a refused one is recorded (`status.refused`) and not retried at the
  same generation;
- `auto`: on every reconcile (after a restart, or when the entity's config switched one on);
- deletion (on_delete): the `stead.dev/cleanup` finalizer holds the object; the delete is sent
  once (`status.deleteRequested`) and the finalizer goes when a deleted state is reached;
- the App's outcome (resource_based): sent once the App has converged on the active attribute set.

The admission webhook runs the same engine on the request (CREATE, UPDATE and DELETE) and refuses
with the engine's code (409, 422) and message; a refused DELETE leaves the object untouched.

Realization (`converge`): in a state with exportResources the instance's App (named after it,
owned by it) runs with the active set as inputs: it is launched once; a change of the active set
reaches it as new inputs (`spec.inputs`), and when its Blueprint has an application action named
`update`, that action runs (an ActionRun `<app>-update-<App generation>`); without one nothing runs
and the App is taken as converged once it observed its new inputs. In a state with purgeResources
the App is deleted (its delete action runs). States with neither leave the App as it is.

Writes: each reconcile writes status once at most (the reconciler composes it), so a trigger and
the auto transfers that follow it share one PATCH; each executed transfer is one Event.

Conditions: Ready when the instance settled (nothing to wait for); Reconciling while its App is
being launched, updated or deleted; Stalled when a client's request was refused, or the last
transfer took its error path (a failed validation, a failed deployment) and the instance waits
for the client, with the reason and the ways out in the message.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from operators import API_VERSION
from operators.calm.actionrun import find_action, snapshot_actions
from operators.calm.app import APP_UID_LABEL, run_body
from operators.calm.models import ACTIONRUN, APP
from operators.lsm.attributes import changed_keys, definitions
from operators.lsm.lifecycle import resource_intent
from operators.lsm.machine import (
    Auto,
    Create,
    Delete,
    LifecycleError,
    Refused,
    ResourceOutcome,
    SetState,
    Update,
    pending_request,
    ways_out,
)
from operators.lsm.models import (
    SERVICE_INSTANCE,
    LogEntry,
    RefusedRequest,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
    State,
    TriggerName,
)
from operators.lsm.realization import app_inputs, app_outputs
from operators.lsm.wire import instance_facts, merge_ready, read_instance_status
from operators.lsm.world import Unresolved, World, resolve
from operators.runtime.core import conditions as cond
from operators.runtime.core.clock import utc_now
from operators.runtime.core.kinds import AdmissionRequest, Refusal, spec_admission
from operators.runtime.core.pipeline import (
    RUNTIME_FIELDS,
    Observed,
    PermanentError,
    StepContext,
    TemporaryError,
    spec_step,
    status_patch,
)
from operators.runtime.core.ring import PROJECT_LABEL
from operators.runtime.engine.runs import FINAL_RUN_STATES
from operators.runtime.kube.client import ApiError, Requester
from operators.runtime.kube.objects import Objects

log = logging.getLogger(__name__)

INSTANCE_LABEL = "stead.dev/service-instance"
"""On the App of an instance: the instance's name."""
POLL_SECONDS = 2.0
POLL_MAX_SECONDS = 15.0
"""An instance waiting for its App looks at it every POLL_SECONDS at first, then less often, up to
POLL_MAX_SECONDS (a quarter of how long it has waited): its App coming to rest (Ready or Stalled) or
going checks it at once (`depends_on`), so the poll is for what changes no App condition, the end of
an update action (an ActionRun the instance started), and it must not cost the API server a GET per
instance every 2 s while 200 Apps run."""
REALIZE_LIMIT = 8
"""The most resource outcomes one reconcile takes (each may lead to a state that deploys differently)."""
UPDATE_ACTION = "update"


@dataclass(frozen=True)
class Waiting:
    """The App is not where the state wants it yet: checked again after `delay`."""

    reason: str
    message: str


def poll_delay(status: Mapping[str, Any], now: datetime) -> float:
    """When to look at the App again: a quarter of the time the instance has waited so far (since its
    Reconciling condition turned True), within POLL_SECONDS..POLL_MAX_SECONDS."""
    since = next((c.get("lastTransitionTime") for c in status.get("conditions") or []
                  if c.get("type") == cond.RECONCILING and c.get("status") == "True"), None)
    try:
        waited = (now - datetime.fromisoformat(str(since))).total_seconds() if since else 0.0
    except ValueError:
        waited = 0.0
    return min(max(POLL_SECONDS, waited / 4), POLL_MAX_SECONDS)


# --- reading the object ---------------------------------------------------------------------------


def read_spec(ctx: StepContext[ServiceInstanceSpec]) -> ServiceInstanceSpec:
    try:
        return ctx.spec
    except ValidationError as error:
        raise PermanentError("InvalidSpec", "; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                       for e in error.errors())) from None


def _state(world: World, name: str) -> State | None:
    return next((s for s in world.lifecycle.states if s.name == name), None)


# --- the client's triggers ------------------------------------------------------------------------


async def take_client_triggers(world: World, spec: ServiceInstanceSpec, status: ServiceInstanceStatus,
                               generation: int) -> tuple[ServiceInstanceStatus, list[LogEntry]]:
    """Creation, a pending state request, a change of the attributes, then auto transfers. A refused
    creation raises `Refused`; a refused request or update is recorded in status instead (handled once).
    Raises `LifecycleError` when the lifecycle cannot go on."""
    transfers: list[LogEntry] = []
    if status.state is None:
        outcome = await world.advance(status, Create(spec.attributes))
        status, transfers = outcome.status, list(outcome.transfers)
    request = pending_request(spec, status)
    if request is not None:
        trigger = SetState(request.target, request.current_version, request.message)
        status, taken = await _take(world, status, trigger, "api_set_state", generation)
        if taken is None:
            status = status.model_copy(update={"state_request": request})
        transfers += taken or []
    refused = status.refused
    retried = refused is not None and refused.trigger == "on_update" and refused.generation == generation
    if not retried and changed_keys(status.client_attributes or {}, spec.attributes):
        status, taken = await _take(world, status, Update(spec.attributes, spec.current_version), "on_update",
                                    generation)
        transfers += taken or []
    outcome = await world.advance(status, Auto())
    return outcome.status, [*transfers, *outcome.transfers]


async def _take(world: World, status: ServiceInstanceStatus, trigger: SetState | Update | Delete,
                name: TriggerName, generation: int) -> tuple[ServiceInstanceStatus, list[LogEntry] | None]:
    """Apply a client's trigger: the new status and its transfers, or the status with the refusal recorded
    and None."""
    try:
        outcome = await world.advance(status, trigger)
    except Refused as refusal:
        record = RefusedRequest(trigger=name, reason=refusal.reason, message=refusal.message, generation=generation,
                                time=utc_now())
        return status.model_copy(update={"refused": record}), None
    return outcome.status.model_copy(update={"refused": None}), list(outcome.transfers)


async def check_request(world: World, spec: ServiceInstanceSpec, status: ServiceInstanceStatus,
                        old_spec: ServiceInstanceSpec | None = None) -> None:
    """Refuse (`Refused`, 409 or 422) what a client's write would ask the lifecycle for and it does not
    allow: the admission webhook's check, which the inventory API shares. `old_spec` is the spec the write
    replaces (None for a creation); what did not change in it asks for nothing."""
    if status.state is None:
        if old_spec is None or old_spec.attributes != spec.attributes:
            await world.advance(ServiceInstanceStatus(), Create(spec.attributes))
        return
    request = pending_request(spec, status)
    new_request = request is not None and (old_spec is None or old_spec.state_request != spec.state_request)
    new_attributes = old_spec is None or old_spec.attributes != spec.attributes
    updating = new_attributes and bool(changed_keys(status.client_attributes or {}, spec.attributes))
    if new_request and updating:
        raise Refused("spec: one request at a time: change spec.attributes (an update) or spec.stateRequest (a "
                      "state request), not both in one write", 422, "OneRequestAtATime")
    if new_request and request is not None:
        await world.advance(status, SetState(request.target, request.current_version, request.message))
    elif updating:
        await world.advance(status, Update(spec.attributes, spec.current_version))


# --- the App ------------------------------------------------------------------------------------


def _ours(app: Mapping[str, Any], uid: str) -> bool:
    refs = (app.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def _deleting(body: Mapping[str, Any]) -> bool:
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))


def _stalled_message(status: Mapping[str, Any]) -> str | None:
    found = cond.find(status.get("conditions") or [], cond.STALLED)
    if found is not None and found.get("status") == "True":
        return str(found.get("message") or found.get("reason") or "stalled")
    return None


def app_body(obj: Observed, blueprint: str, inputs: Mapping[str, str]) -> dict[str, Any]:
    """The App of an instance: its name, owned by it, launched from the entity's Blueprint."""
    labels = {INSTANCE_LABEL: obj.name,
              **({PROJECT_LABEL: obj.labels[PROJECT_LABEL]} if PROJECT_LABEL in obj.labels else {})}
    return {
        "apiVersion": API_VERSION, "kind": APP.kind,
        "metadata": {"name": obj.name, "namespace": obj.namespace, "labels": labels, "ownerReferences": [
            {"apiVersion": API_VERSION, "kind": SERVICE_INSTANCE.kind, "name": obj.name, "uid": obj.uid,
             "controller": True}]},
        "spec": {"blueprint": blueprint, "inputs": dict(inputs)},
    }


def update_run_name(app: str, generation: int) -> str:
    suffix = f"-update-{generation}"
    return app[:253 - len(suffix)] + suffix


def has_update_action(app_status: Mapping[str, Any]) -> bool:
    snapshot = app_status.get("snapshot")
    if not snapshot:
        return False
    _, actions = snapshot_actions(snapshot)
    return find_action(actions, UPDATE_ACTION) is not None


@dataclass(frozen=True)
class Converged:
    """What the App of an instance came to: an outcome to send, a wait, or nothing to do; and whether an
    App of the instance exists now (`status.app`)."""

    result: ResourceOutcome | Waiting | None
    app: str | None


async def converge(world: World, obj: Observed, status: ServiceInstanceStatus) -> Converged:
    """Bring the App to what the instance's state wants of it, as far as one look allows."""
    here = _state(world, str(status.state))
    intent = resource_intent(here) if here is not None else "none"
    if intent == "none":
        return Converged(None, status.app)
    realization = world.entity.realization
    if realization is None:
        return Converged(ResourceOutcome(True), None)  # nothing to deploy or remove: done at once
    objects, name = Objects(world.services.kube), obj.name
    app = await objects.find(APP, obj.namespace, name)
    if app is not None and not _ours(app, obj.uid):
        if intent == "purge":
            return Converged(ResourceOutcome(True), None)  # nothing of ours to remove
        if _deleting(app):
            return Converged(Waiting("WaitingForApp", f"App {name} of an earlier instance of this name is being "
                                     "deleted; this instance's App is launched when it is gone"), None)
        raise PermanentError("AppConflict", f"App {name} exists and is not this instance's (no owner reference to "
                             f"ServiceInstance {name} uid {obj.uid}): delete or rename it, then change the instance",
                             facts=instance_facts(obj.status, status))
    if intent == "purge":
        return Converged(await _purge(objects, obj, app), None if app is None else name)
    inputs = app_inputs(world.entity, status.active_attributes or {})
    if app is None:
        try:
            await objects.create(APP, obj.namespace, app_body(obj, realization.blueprint, inputs))
        except ApiError as error:
            if error.status >= 500 or error.status == 409:
                raise TemporaryError("AppNotLaunched", f"App {name} not created: {error.message}",
                                     delay=POLL_SECONDS) from None
            return Converged(ResourceOutcome(False, f"App {name} not launched: {error.message}"), None)
        return Converged(Waiting("WaitingForApp", f"App {name}: launching (its create action runs)"), name)
    if _deleting(app):
        return Converged(Waiting("WaitingForApp", f"App {name} is being deleted; a new one is launched when it is "
                                 "gone"), name)
    current = dict((app.get("spec") or {}).get("inputs") or {})
    if current != inputs:
        try:
            app = await objects.patch(APP, obj.namespace, name, {"spec": {"inputs": merge_ready(current, inputs)}})
        except ApiError as error:
            if error.status in (409, 423) or error.status >= 500:  # locked by a run, or a concurrent write
                return Converged(Waiting("WaitingForApp", f"App {name} does not take new inputs yet: "
                                         f"{error.message}"), name)
            return Converged(ResourceOutcome(False, f"App {name} refused the new inputs: {error.message}"), name)
    return Converged(await _app_result(world, obj, app), name)


async def _purge(objects: Objects, obj: Observed, app: dict[str, Any] | None) -> ResourceOutcome | Waiting:
    if app is None:
        return ResourceOutcome(True)
    name = obj.name
    if not _deleting(app):
        try:
            await objects.delete(APP, obj.namespace, name)
        except ApiError as error:
            if error.status == 404:
                return ResourceOutcome(True)
            raise
    else:
        stalled = _stalled_message(app.get("status") or {})
        if stalled is not None:
            return ResourceOutcome(False, f"App {name} was not deleted: {stalled}")
    return Waiting("DeletingApp", f"App {name}: being deleted (its delete action runs)")


async def _app_result(world: World, obj: Observed, app: dict[str, Any]) -> ResourceOutcome | Waiting:
    """The outcome of an App that has the instance's inputs, or a wait until there is one."""
    objects, name = Objects(world.services.kube), obj.name
    meta, status = app.get("metadata") or {}, app.get("status") or {}
    generation = int(meta.get("generation") or 1)
    launching = Waiting("WaitingForApp", f"App {name}: launching (its create action runs)")
    if generation > 1 and has_update_action(status):
        run_name = update_run_name(name, generation)
        updating = Waiting("WaitingForApp", f"App {name}: taking the new inputs (its update action runs: ActionRun "
                           f"{run_name})")
        run = await objects.find(ACTIONRUN, obj.namespace, run_name)
        if run is None:
            try:
                await objects.create(ACTIONRUN, obj.namespace,
                                     run_body(Observed.from_body(app), run_name, UPDATE_ACTION, owned=True))
            except ApiError as error:
                if error.status in (409, 423) or error.status >= 500:
                    return updating
                return ResourceOutcome(False, f"App {name}: its update action was not started: {error.message}")
            return updating
        if ((run.get("metadata") or {}).get("labels") or {}).get(APP_UID_LABEL) != meta.get("uid"):
            with contextlib.suppress(ApiError):  # the record of an earlier App of the same name
                await objects.delete(ACTIONRUN, obj.namespace, run_name)
            return updating
        run_status = run.get("status") or {}
        state = run_status.get("state")
        if state not in FINAL_RUN_STATES:
            return updating
        if state != "Succeeded":
            why = run_status.get("reason") or run_status.get("message") or state
            task = run_status.get("failedTask")
            return ResourceOutcome(False, f"App {name}: update action {str(state).lower()}"
                                   f"{f' at {task}' if task else ''}: {why}")
        fresh = await objects.find(APP, obj.namespace, name)  # with what the run recorded
        return _success(world, name, (fresh or app).get("status") or {})
    if status.get("observedGeneration") != generation:
        return launching if generation == 1 else Waiting(
            "WaitingForApp", f"App {name}: taking the new inputs (its Blueprint has no update action)")
    stalled = _stalled_message(status)
    if stalled is not None:
        return ResourceOutcome(False, f"App {name}: {stalled}")
    if not cond.is_true(status.get("conditions") or [], cond.READY) or status.get("lock"):
        return launching if generation == 1 else Waiting(
            "WaitingForApp", f"App {name}: taking the new inputs (its Blueprint has no update action)")
    failure = status.get("failure") or {}
    if failure.get("action") == "create":  # never created (a user action failing later is not the deployment's)
        return ResourceOutcome(False, f"App {name}: its create action failed: {failure.get('reason') or 'failed'}")
    return _success(world, name, status)


def _success(world: World, name: str, app_status: Mapping[str, Any]) -> ResourceOutcome:
    outputs, problems = app_outputs(world.entity, app_status)
    defs = definitions(world.entity)
    missing = [p for p in problems if not defs.get(p.split(":", 1)[0]) or not defs[p.split(":", 1)[0]].optional]
    if missing:
        return ResourceOutcome(False, f"App {name} did not set what the entity reads back: {'; '.join(missing)}")
    return ResourceOutcome(True, outputs=outputs)


# --- one reconcile ------------------------------------------------------------------------------


def record_transfers(ctx: StepContext, transfers: list[LogEntry] | tuple[LogEntry, ...]) -> None:
    """One Event per executed transfer."""
    if ctx.services is None:
        return
    for entry in transfers:
        text = f"{entry.from_ or '(new)'} -> {entry.to} ({entry.trigger}, version {entry.version})"
        if entry.message:
            text += f": {entry.message}"
        ctx.services.events.record(ctx.obj, "Warning" if entry.error else "Normal",
                                   "TransferError" if entry.error else "Transfer", text)


async def realize(world: World, ctx: StepContext, status: ServiceInstanceStatus
                  ) -> tuple[ServiceInstanceStatus, Waiting | None]:
    """Converge the App and send its outcomes until the instance waits for it or needs it no more."""
    for _ in range(REALIZE_LIMIT):
        converged = await converge(world, ctx.obj, status)
        status = status.model_copy(update={"app": converged.app})
        result = converged.result
        if result is None:
            return status, None
        if isinstance(result, Waiting):
            return status, result
        outcome = await world.advance(status, result)
        record_transfers(ctx, outcome.transfers)
        if not outcome.changed:
            return status, None
        status = outcome.status
    return status, None


def _ways(world: World, status: ServiceInstanceStatus) -> str:
    ways = ways_out(world.context(), str(status.state))
    return f"ways out: {'; '.join(ways)}" if ways else "no way out"


REFUSED, REJECTED, FAILED = "Refused", "Rejected", "Failed"
"""The phases of a settled instance that waits for its client (Stalled), in place of `Realizing`, which
would say its App is still being worked on: its last request was refused, its attributes failed
validation, or its deployment failed. The STATE column says where its lifecycle holds it."""


def settled_problem(world: World, status: ServiceInstanceStatus, generation: int) -> PermanentError | None:
    """Why a settled instance waits for its client (Stalled), or None when it is where it should be."""
    refused = status.refused
    if refused is not None and refused.generation == generation:
        return PermanentError(refused.reason, f"{refused.message} ({_ways(world, status)})", phase=REFUSED)
    last = status.log[-1] if status.log else None
    if last is not None and last.error and last.to == status.state:
        reason, phase = ("ValidationFailed", REJECTED) if status.validation_problems else ("DeploymentFailed", FAILED)
        return PermanentError(reason, f'state "{status.state}": {last.message or reason} ({_ways(world, status)})',
                              phase=phase)
    return None


def _unresolved(error: Unresolved, facts: Mapping[str, Any] | None = None) -> PermanentError | TemporaryError:
    if error.waiting:
        return TemporaryError(error.reason, error.message, delay=60.0, facts=facts, waiting=True)
    return PermanentError(error.reason, error.message, facts=facts)


async def _world(ctx: StepContext, spec: ServiceInstanceSpec, *, lenient: bool = False) -> World:
    try:
        return await resolve(ctx.services, ctx.obj.namespace, ctx.obj.name, spec.entity, lenient=lenient)
    except Unresolved as error:
        raise _unresolved(error) from None


@spec_step(ServiceInstanceSpec)
async def take_in(ctx: StepContext[ServiceInstanceSpec]) -> Mapping[str, Any]:
    """Init -> Realizing: resolve the entity and lifecycle; take creation, a state request, an update and
    auto transfers in."""
    spec = read_spec(ctx)
    world = await _world(ctx, spec)
    status = read_instance_status(ctx.obj.status)
    try:
        status, transfers = await take_client_triggers(world, spec, status, ctx.obj.generation)
    except Refused as refusal:  # a creation the webhook would have refused (it was bypassed)
        raise PermanentError(refusal.reason, refusal.message, phase=REFUSED) from None
    except LifecycleError as error:
        raise PermanentError(error.reason, error.message) from None
    record_transfers(ctx, transfers)
    return instance_facts(ctx.obj.status, status)


def _current(obj: Observed, facts: Mapping[str, Any]) -> ServiceInstanceStatus:
    merged = {key: value for key, value in {**obj.status, **facts}.items() if value is not None}
    return read_instance_status(merged)


@spec_step(ServiceInstanceSpec)
async def realize_step(ctx: StepContext[ServiceInstanceSpec]) -> Mapping[str, Any]:
    """Realizing -> Provisioned: bring the App where the state wants it and follow its outcomes; wait while
    it gets there; end Ready, or Stalled when the instance waits for its client."""
    obj = ctx.obj
    spec = read_spec(ctx)
    status = _current(obj, ctx.facts)
    if status.state is None:
        raise PermanentError("NotCreated", "the instance has not been created")
    world = await _world(ctx, spec)
    try:
        status, waiting = await realize(world, ctx, status)
    except LifecycleError as error:
        raise PermanentError(error.reason, error.message, facts=instance_facts(obj.status, status)) from None
    facts = instance_facts(obj.status, status)
    if status.deleted:
        # a deleted state reached without a delete (a rejected creation in a lifecycle that deletes it):
        # the object goes too, once its status says so (the delete webhook then lets it go)
        if read_instance_status(obj.status).deleted:
            with contextlib.suppress(ApiError):
                await Objects(world.services.kube).delete(SERVICE_INSTANCE, obj.namespace, obj.name)
        raise TemporaryError("Terminated", f'state "{status.state}" is a deleted state: the instance goes',
                             delay=1.0, facts=facts, waiting=True)
    if waiting is not None:
        raise TemporaryError(waiting.reason, waiting.message, delay=poll_delay(obj.status, datetime.now(UTC)),
                             facts=facts, waiting=True)
    problem = settled_problem(world, status, obj.generation)
    if problem is not None:
        problem.facts.update(facts)
        raise problem
    return facts


# --- deletion -----------------------------------------------------------------------------------


async def namespace_terminating(kube: Requester, namespace: str) -> bool:
    """Whether the namespace is being deleted (then nothing may keep an object from going)."""
    try:
        body = await kube.request("GET", f"/api/v1/namespaces/{namespace}")
    except ApiError as error:
        return error.status == 404
    return bool((body.get("metadata") or {}).get("deletionTimestamp")) or (
        (body.get("status") or {}).get("phase") == "Terminating")


async def _drop_app(kube: Requester, obj: Observed) -> None:
    """Delete the App of an instance that goes without its lifecycle (its delete action still runs)."""
    objects = Objects(kube)
    app = await objects.find(APP, obj.namespace, obj.name)
    if app is not None and _ours(app, obj.uid) and not _deleting(app):
        with contextlib.suppress(ApiError):
            await objects.delete(APP, obj.namespace, obj.name)


@spec_step(ServiceInstanceSpec)
async def release(ctx: StepContext[ServiceInstanceSpec]) -> Mapping[str, Any]:
    """The cleanup (`stead.dev/cleanup` finalizer): send the delete to the lifecycle once, follow it to a
    deleted state (the App purged on the way), then let the object go.

    An instance never created, or already in a deleted state, goes at once. One whose entity or lifecycle
    cannot be resolved any more goes too, its App deleted, with a Warning. One whose state has no on_delete
    transfer (the webhook was bypassed) stays, Stalled, until a state request moves it to a state that has
    one, unless its namespace is being deleted."""
    obj = ctx.obj
    kube = ctx.services.kube
    status = read_instance_status(obj.status)
    if status.state is None or status.deleted:
        return {}
    try:
        spec: ServiceInstanceSpec | None = ctx.spec
    except ValidationError:
        spec = None
    try:
        world = await resolve(ctx.services, obj.namespace, obj.name, str(obj.spec.get("entity")), lenient=True)
    except Unresolved as error:
        await _drop_app(kube, obj)
        ctx.services.events.record(obj, "Warning", error.reason, f"{error.message}: the instance goes without its "
                                   "lifecycle's delete path (its App is deleted)")
        return {}
    try:
        transfers: list[LogEntry] = []
        if spec is not None:
            status, transfers = await take_client_triggers(world, spec, status, obj.generation)
        if not status.delete_requested and not status.deleted:
            try:
                outcome = await world.advance(status, Delete())
            except Refused as refusal:
                record_transfers(ctx, transfers)
                if await namespace_terminating(kube, obj.namespace):
                    await _drop_app(kube, obj)
                    return {}
                raise PermanentError(refusal.reason, f"{refusal.message}; the instance stays (being deleted) until "
                                     f"a state request moves it to a state that allows a delete "
                                     f"({_ways(world, status)})", facts=instance_facts(obj.status, status)) from None
            status = outcome.status.model_copy(update={"delete_requested": True})
            transfers += outcome.transfers
        record_transfers(ctx, transfers)
        status, waiting = await realize(world, ctx, status)
    except LifecycleError as error:
        if await namespace_terminating(kube, obj.namespace):
            await _drop_app(kube, obj)
            return {}
        raise PermanentError(error.reason, error.message, facts=instance_facts(obj.status, status)) from None
    facts = instance_facts(obj.status, status)
    if status.deleted:
        kept = {key: value for key, value in obj.status.items() if key not in RUNTIME_FIELDS}
        patch = status_patch(kept, {**kept, **facts})
        if patch:
            with contextlib.suppress(ApiError):  # the object goes either way
                await kube.patch_status(SERVICE_INSTANCE.plural, obj.namespace, obj.name, patch)
        return {}
    if waiting is not None:
        raise TemporaryError(waiting.reason, waiting.message, delay=poll_delay(obj.status, datetime.now(UTC)),
                             facts=facts, waiting=True)
    raise PermanentError("NotDeleted", f'after its delete the instance is in state "{status.state}", not a deleted '
                         f"one ({_ways(world, status)})", facts=facts)


# --- admission ----------------------------------------------------------------------------------


@spec_admission(ServiceInstanceSpec)
async def admission(request: AdmissionRequest[ServiceInstanceSpec]) -> None:
    """The engine on the request: a creation, an update or a state request the lifecycle refuses, and a
    delete in a state without an on_delete transfer, are refused with its code and message."""
    services = request.services
    if request.operation == "DELETE":
        await _admit_delete(request)
        return
    spec = request.parsed
    old_spec: ServiceInstanceSpec | None = None
    status = ServiceInstanceStatus()
    if request.operation == "UPDATE" and request.old is not None:
        old_spec = request.parse(request.old.get("spec") or {})
        if old_spec.entity != spec.entity:
            raise Refusal(f"spec.entity: cannot change (from {old_spec.entity} to {spec.entity}): an instance "
                          "belongs to its entity for good", 422)
        status = read_instance_status(request.old.get("status") or {})
    if services is None:
        return
    try:
        world = await resolve(services, request.namespace, request.name, spec.entity, lenient=True)
    except Unresolved:
        return  # not resolvable yet: the pipeline waits for the entity, Stalled with the reason
    try:
        await check_request(world, spec, status, old_spec)
    except LifecycleError:
        return  # the lifecycle's problem, not the request's: the pipeline shows it


async def check_delete(world: World, status: ServiceInstanceStatus, current_version: int | None = None) -> None:
    """Refuse (`Refused`, 409) a delete the lifecycle does not allow in the instance's state: the admission
    webhook's check on DELETE, which the inventory API shares. An instance never created, already in a
    deleted state, or whose delete was taken in already may always go."""
    if status.state is None or status.deleted or status.delete_requested:
        return
    await world.advance(status, Delete(current_version))


async def _admit_delete(request: AdmissionRequest) -> None:
    old = request.old or {}
    services = request.services
    if services is None or _deleting(old):
        return
    status = read_instance_status(old.get("status") or {})
    entity = str((old.get("spec") or {}).get("entity") or "")
    try:
        world = await resolve(services, request.namespace, request.name, entity, lenient=True)
        await check_delete(world, status)
    except (Unresolved, LifecycleError):
        return  # nothing to judge the delete by: it goes (its cleanup deletes the App)
    except Refused:
        if await namespace_terminating(services.kube, request.namespace):
            return
        raise
