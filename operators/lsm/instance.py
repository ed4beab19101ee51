"""The ServiceInstance kind's work: admission, the pipeline and deletion.

What moves an instance is a *trigger*, and the state machine (`operators.lsm.machine.advance`)
decides what it does. The kind turns what happens to the object into triggers:

- creation: the first reconcile of an instance with no state;
- `spec.stateRequest` (api_set_state): a request not taken in yet (`pending_request`); it is
  recorded in `status.stateRequest` even when refused, so each one is handled once;
- a change of `spec.attributes` (on_update): the whole client set, compared with
  `status.clientAttributes`; a refused one is recorded (`status.refused`) and not retried at the
  same generation;
- a change of `spec.entityVersion` with `spec.migration` (migrate): the instance moves to that entity
  version (`operators.lsm.versions`), or the refusal is recorded (`status.refused`) as for an update;
- `auto`: on every reconcile (after a restart, or when the entity's config switched one on);
- deletion (on_delete): the `stead.dev/cleanup` finalizer holds the object; the delete is sent
  once (`status.deleteRequested`) and the finalizer goes when a deleted state is reached;
- the App's outcome (resource_based): sent once the App has converged on the active attribute set.

The admission webhook runs the same engine on the request (CREATE, UPDATE and DELETE) and refuses
with the engine's code (409, 422) and message; a refused DELETE leaves the object untouched.

Realization (`operators.lsm.converge`): in a state with exportResources or purgeResources the
instance's App is launched, updated or deleted; the client's triggers and the checks the admission
webhook shares are `operators.lsm.triggers`. This module is the kind's pipeline steps and webhook,
which put those two together.

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
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from operators.calm.models import APP
from operators.lsm.converge import Waiting, converge, deleting, owned_by, poll_delay
from operators.lsm.diff import preview
from operators.lsm.machine import Delete, LifecycleError, Refused, ways_out
from operators.lsm.models import SERVICE_INSTANCE, LogEntry, ServiceDiff, ServiceInstanceSpec, ServiceInstanceStatus
from operators.lsm.notify import Instance, publish
from operators.lsm.related import with_relation_check
from operators.lsm.relations import references
from operators.lsm.triggers import check_delete, check_migration, check_request, take_client_triggers, take_migration
from operators.lsm.versions import instance_version, migration_pending
from operators.lsm.wire import instance_facts, read_instance_status
from operators.lsm.world import Unresolved, World, find_blueprint, resolve
from operators.runtime import (
    RUNTIME_FIELDS,
    AdmissionRequest,
    ApiError,
    Objects,
    Observed,
    PermanentError,
    Refusal,
    Requester,
    StepContext,
    TemporaryError,
    spec_admission,
    spec_step,
    status_patch,
)

log = logging.getLogger(__name__)

REALIZE_LIMIT = 8
"""The most resource outcomes one reconcile takes (each may lead to a state that deploys differently)."""


# --- reading the object ---------------------------------------------------------------------------


def read_spec(ctx: StepContext[ServiceInstanceSpec]) -> ServiceInstanceSpec:
    try:
        return ctx.spec
    except ValidationError as error:
        raise PermanentError("InvalidSpec", "; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                       for e in error.errors())) from None


# --- one reconcile ------------------------------------------------------------------------------


def record_transfers(ctx: StepContext, world: World, transfers: list[LogEntry] | tuple[LogEntry, ...]) -> None:
    """One Event per executed transfer, and the entity's notifications (queued, sent off this path)."""
    if ctx.services is None:
        return
    obj = ctx.obj
    publish(Instance(obj.namespace, world.entity_name, obj.name, obj.uid), world.entity.notifications, transfers)
    for entry in transfers:
        if entry.trigger == "expert":  # the audit of expert mode: who did what, beside the transfers
            ctx.services.events.record(ctx.obj, "Warning", "ExpertMode",
                                       f"{entry.message} (version {entry.version})")
            continue
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
        record_transfers(ctx, world, outcome.transfers)
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


async def _world(ctx: StepContext, spec: ServiceInstanceSpec, status: ServiceInstanceStatus, *,
                 lenient: bool = False) -> World:
    """The instance's world at the entity version it uses."""
    try:
        return await resolve(ctx.services, ctx.obj.namespace, ctx.obj.name, spec.entity, lenient=lenient,
                             version=instance_version(spec, status))
    except Unresolved as error:
        raise _unresolved(error) from None


async def _migration_target(ctx: StepContext, spec: ServiceInstanceSpec, status: ServiceInstanceStatus
                            ) -> World | Refused:
    """The world of the version a migration asks for, or why the instance cannot go there."""
    try:
        return await resolve(ctx.services, ctx.obj.namespace, ctx.obj.name, spec.entity,
                             version=spec.entity_version)
    except Unresolved as error:
        if error.reason == "EntityVersionNotFound":
            return Refused(error.message, 422, error.reason)
        raise _unresolved(error) from None


@spec_step(ServiceInstanceSpec)
async def take_in(ctx: StepContext[ServiceInstanceSpec]) -> Mapping[str, Any]:
    """Init -> Realizing: resolve the entity version and lifecycle; take creation, a migration to another entity
    version, a state request, an update and auto transfers in."""
    spec = read_spec(ctx)
    status = read_instance_status(ctx.obj.status)
    world = await _world(ctx, spec, status)
    transfers: list[LogEntry] = []
    if migration_pending(spec, status, world.entity_version):
        target = await _migration_target(ctx, spec, status)
        status, transfers, world = take_migration(world, target, spec, status, ctx.obj.generation)
    world = await with_relation_check(world, spec.attributes, status.candidate_attributes)
    try:
        status, taken = await take_client_triggers(world, spec, status, ctx.obj.generation)
    except Refused as refusal:  # a creation the webhook would have refused (it was bypassed)
        raise PermanentError(refusal.reason, refusal.message, phase=REFUSED) from None
    except LifecycleError as error:
        raise PermanentError(error.reason, error.message) from None
    record_transfers(ctx, world, [*transfers, *taken])
    named = references(world.entity, spec.attributes, status.candidate_attributes, status.active_attributes)
    status = status.model_copy(update={"diff": await what_would_change(world, ctx.obj, status),
                                       "references": named or None, "entity_version": world.entity_version})
    return instance_facts(ctx.obj.status, status)


async def what_would_change(world: World, obj: Observed, status: ServiceInstanceStatus) -> ServiceDiff | None:
    """`status.diff` once the triggers are taken in (`operators.lsm.diff`): the live App and the Blueprint's
    secret variables are read only while a candidate set waits."""
    async def app() -> dict[str, Any] | None:
        return await Objects(world.services.kube).find(APP, obj.namespace, obj.name)

    async def secret() -> set[str]:
        if world.entity.realization is None:
            return set()
        try:
            spec = await find_blueprint(world.services, obj.namespace, world.entity.realization.blueprint)
        except Unresolved:
            return set()
        return {str(v.get("name")) for v in spec.get("variables") or [] if v.get("type") == "secret"}

    return await preview(world.advance, world.entity, world.lifecycle, status, app, secret, obj.uid, obj.name)


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
    if status.destroyed:
        await _destroy(ctx, status)
    world = await _world(ctx, spec, status)
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
        delay = waiting.delay if waiting.delay is not None else poll_delay(obj.status, datetime.now(UTC))
        raise TemporaryError(waiting.reason, waiting.message, delay=delay, facts=facts, waiting=True)
    problem = settled_problem(world, status, obj.generation)
    if problem is not None:
        problem.facts.update(facts)
        raise problem
    return facts


# --- deletion -----------------------------------------------------------------------------------


async def _destroy(ctx: StepContext, status: ServiceInstanceStatus) -> None:
    """An expert destroyed the instance: once its status says so, its App and the object go (the cleanup
    lets a destroyed instance go at once), and nothing of the lifecycle runs."""
    obj = ctx.obj
    facts = instance_facts(obj.status, status)
    if read_instance_status(obj.status).destroyed:
        kube = ctx.services.kube
        await _drop_app(kube, obj)
        with contextlib.suppress(ApiError):
            await Objects(kube).delete(SERVICE_INSTANCE, obj.namespace, obj.name)
    raise TemporaryError("Destroyed", "an expert destroyed the instance: it goes with its App, without its "
                         "lifecycle's delete", delay=1.0, facts=facts, waiting=True)



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
    if app is not None and owned_by(app, obj.uid) and not deleting(app):
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
    if status.destroyed:
        await _drop_app(kube, obj)
        return {}
    try:
        spec: ServiceInstanceSpec | None = ctx.spec
    except ValidationError:
        spec = None
    try:
        world = await resolve(ctx.services, obj.namespace, obj.name, str(obj.spec.get("entity")), lenient=True,
                              version=status.entity_version)
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
                record_transfers(ctx, world, transfers)
                if await namespace_terminating(kube, obj.namespace):
                    await _drop_app(kube, obj)
                    return {}
                raise PermanentError(refusal.reason, f"{refusal.message}; the instance stays (being deleted) until "
                                     f"a state request moves it to a state that allows a delete "
                                     f"({_ways(world, status)})", facts=instance_facts(obj.status, status)) from None
            status = outcome.status.model_copy(update={"delete_requested": True})
            transfers += outcome.transfers
        record_transfers(ctx, world, transfers)
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
        world = await resolve(services, request.namespace, request.name, spec.entity, lenient=True,
                              version=instance_version(spec, status))
    except Unresolved as error:
        if error.reason == "EntityVersionNotFound":
            raise Refusal(error.message, 422) from None
        return  # not resolvable yet: the pipeline waits for the entity, Stalled with the reason
    try:
        await _admit_migration(request, world, spec, status, old_spec)
        await check_request(world, spec, status, old_spec)
    except LifecycleError:
        return  # the lifecycle's problem, not the request's: the pipeline shows it


async def _admit_migration(request: AdmissionRequest, world: World, spec: ServiceInstanceSpec,
                           status: ServiceInstanceStatus, old_spec: ServiceInstanceSpec | None) -> None:
    """A new migration (spec.entityVersion or spec.migration changed, to another version than the one in force)
    is checked as the pipeline will take it: refused naming the attributes that do not pass the new version."""
    if old_spec is None or not migration_pending(spec, status, world.entity_version):
        return
    if (old_spec.entity_version, old_spec.migration) == (spec.entity_version, spec.migration):
        return
    if old_spec.attributes != spec.attributes or (spec.state_request != old_spec.state_request
                                                  and spec.state_request is not None):
        raise Refusal("spec: one request at a time: a migration (spec.entityVersion, spec.migration) goes alone, "
                      "without a change of spec.attributes or spec.stateRequest", 422)
    assert request.services is not None
    try:
        target = await resolve(request.services, request.namespace, request.name, spec.entity, lenient=True,
                               version=spec.entity_version)
    except Unresolved as error:
        if error.reason == "EntityVersionNotFound":
            raise Refusal(error.message, 422) from None
        return
    check_migration(world, target, spec, status)


async def _admit_delete(request: AdmissionRequest) -> None:
    old = request.old or {}
    services = request.services
    if services is None or deleting(old):
        return
    status = read_instance_status(old.get("status") or {})
    entity = str((old.get("spec") or {}).get("entity") or "")
    try:
        world = await resolve(services, request.namespace, request.name, entity, lenient=True,
                              version=status.entity_version)
        await check_delete(world, status)
    except (Unresolved, LifecycleError):
        return  # nothing to judge the delete by: it goes (its cleanup deletes the App)
    except Refused:
        if await namespace_terminating(services.kube, request.namespace):
            return
        raise
