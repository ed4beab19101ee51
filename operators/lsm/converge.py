"""Realization: bring the App of a ServiceInstance to what the instance's state wants of it.

Its own module because it is the one part of the kind that works on another object (the App, and
the ActionRun of its update action), with its own rules; the pipeline (`operators.lsm.instance`)
asks `converge` and sends the outcome to the lifecycle.

In a state with exportResources the instance's App (named after it, owned by it) runs with the
active set as inputs: it is launched once; a change of the active set reaches it as new inputs
(`spec.inputs`), and when its Blueprint has an application action named `update`, that action runs
(an ActionRun `<app>-update-<App generation>`); without one nothing runs and the App is taken as
converged once it observed its new inputs. In a state with purgeResources the App is deleted (its
delete action runs). States with neither leave the App as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from operators import API_VERSION
from operators.calm.actionrun import find_action, snapshot_actions
from operators.calm.app import APP_UID_LABEL, run_body
from operators.calm.models import ACTIONRUN, APP
from operators.lsm.attributes import definitions
from operators.lsm.lifecycle import resource_intent
from operators.lsm.machine import ResourceOutcome
from operators.lsm.models import SERVICE_INSTANCE, ServiceInstanceStatus, State
from operators.lsm.realization import app_inputs, app_outputs
from operators.lsm.related import not_up
from operators.lsm.wire import instance_facts, merge_ready
from operators.lsm.world import World
from operators.runtime import (
    FINAL_RUN_STATES,
    PROJECT_LABEL,
    ApiError,
    Objects,
    Observed,
    PermanentError,
    TemporaryError,
)
from operators.runtime import conditions as cond

INSTANCE_LABEL = "stead.dev/service-instance"
"""On the App of an instance: the instance's name."""
POLL_SECONDS = 2.0
POLL_MAX_SECONDS = 15.0
"""An instance waiting for its App looks at it every POLL_SECONDS at first, then less often, up to
POLL_MAX_SECONDS (a quarter of how long it has waited): its App coming to rest (Ready or Stalled) or
going checks it at once (`depends_on`), so the poll is for what changes no App condition, the end of
an update action (an ActionRun the instance started), and it must not cost the API server a GET per
instance every 2 s while 200 Apps run."""
UPDATE_ACTION = "update"
RELATIONS_BACKSTOP_SECONDS = 600.0
"""An instance waiting for the instances it names is told when one of them changes (the kind's `depends_on`);
this look again is only a backstop, not how it goes on."""


@dataclass(frozen=True)
class Waiting:
    """The App is not where the state wants it yet: checked again after `delay`."""

    reason: str
    message: str
    delay: float | None = None
    """When to look again; None: `poll_delay`. A wait that an event ends (relations) sets a long backstop."""


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


def _state(world: World, name: str) -> State | None:
    return next((s for s in world.lifecycle.states if s.name == name), None)


def owned_by(app: Mapping[str, Any], uid: str) -> bool:
    """Whether the App is this instance's (an owner reference to its uid), not an earlier one's of the same
    name nor someone else's: only then may the instance change or delete it."""
    refs = (app.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def deleting(body: Mapping[str, Any]) -> bool:
    """Whether the object is being deleted (a deletionTimestamp): it is waited for, never written to."""
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
    if intent == "deploy":
        waiting = await not_up(world, status)
        if waiting:
            return Converged(Waiting("WaitingForRelations", "deployment waits until the instances it names are up: "
                                     f"{'; '.join(waiting)}", delay=RELATIONS_BACKSTOP_SECONDS), status.app)
    realization = world.entity.realization
    if realization is None:
        return Converged(ResourceOutcome(True), None)  # nothing to deploy or remove: done at once
    objects, name = Objects(world.services.kube), obj.name
    app = await objects.find(APP, obj.namespace, name)
    if app is not None and not owned_by(app, obj.uid):
        if intent == "purge":
            return Converged(ResourceOutcome(True), None)  # nothing of ours to remove
        if deleting(app):
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
    if deleting(app):
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
    if not deleting(app):
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
