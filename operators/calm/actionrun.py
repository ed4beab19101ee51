"""The ActionRun kind: one run of an action on an App (docs/calm.md).

Pipeline: Init (the app and the action exist) -> Pending (take the app's lock) -> Running
(announced: build the workflow and run it) -> Provisioned. A run that fails or is aborted, at
whatever step, ends in phase `Failed` or `Aborted` (`runs.run_pipeline`), Stalled, with the failing
task and the reason in status; `status.state` is the run's own phase (Pending, Running, Succeeded,
Failed, Aborted).

Running the workflow is the runtime's shared run supervision (`operators.runtime.engine.runs`): this
module says what the run is (the action's workflow, the blueprint's secrets) and what the
ActionRun shows of it (progress and the run log tree, at most one status write a second, only
when they changed); it aborts the run when `spec.abort` is set or the app's lock expires, and at
the end records the outcome in the App (its entities, state and failure) and releases the lock.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from operators.calm import workflow as wf
from operators.calm.app import (
    APP_LABEL,
    active_lock,
    carry,
    delete_run_name,
    lock_expired,
    run_holder_gone,
)
from operators.calm.blueprint import secret_owner
from operators.calm.compiler import compile_blueprint
from operators.calm.models import (
    ACTIONRUN,
    APP,
    BlueprintSpec,
    CompiledAction,
    CompiledState,
    KnownHosts,
    SecretSource,
)
from operators.calm.names import ACTIONRUN_SHORT_NAMES
from operators.runtime import (
    FINAL_RUN_STATES,
    RUNTIME_FIELDS,
    Abort,
    AccountCredentials,
    AdmissionRequest,
    ApiError,
    Followed,
    Kind,
    Model,
    Objects,
    PermanentError,
    PrinterColumn,
    Refusal,
    RunRequest,
    SecretReader,
    StatusBase,
    StepContext,
    TemporaryError,
    UntrustedNamespace,
    VaultError,
    follow_run,
    paths_for,
    project_key,
    read_account_secret,
    read_conclusion,
    run_pipeline,
    spec_admission,
    spec_step,
    utc_now,
    utc_seconds,
    write_conclusion,
)
from pipelines.control import read_progress
from pipelines.paths import RunPaths

log = logging.getLogger(__name__)

RunState = Literal["Pending", "Queued", "Running", "Succeeded", "Failed", "Aborted"]
HOOKS = "operators.calm.runhooks:hooks"
TRANSITIONAL = {"create": "provisioning", "start": "starting", "stop": "stopping", "restart": "restarting",
                "delete": "deleting"}
AFTER = {"create": "running", "start": "running", "stop": "stopped", "restart": "running", "delete": "deleted"}
RESTING = ("running", "stopped")
"""The states an app rests in between actions (`status.restingState`)."""


def state_after_success(action: str, app_status: Mapping[str, Any]) -> str:
    """The app's state once `action` succeeded: where the action leads. A system action leads to its own
    state (stop: stopped; create, start, restart: running). Any other action (update, a user action)
    neither starts nor stops the app: it leads to where the app rests, the state the last successful
    action led to (`restingState`: a stop that succeeded and a start that failed after it leave
    `stopped`). `error` is never kept: an update that succeeded after a failed one once left the app in
    error for good. Apps from before `restingState` rest where their state says, else `running`."""
    if action in AFTER:
        return AFTER[action]
    for state in (app_status.get("restingState"), app_status.get("state")):
        if state in RESTING:
            return str(state)
    return "running"


def state_during(action: str, app_status: Mapping[str, Any]) -> str:
    """The app's state while `action` runs: a system action's own (stopping), else the state it was in."""
    return TRANSITIONAL.get(action, app_status.get("state") or "running")


def app_state_fields(action: str, app_status: Mapping[str, Any], succeeded: bool) -> dict[str, Any]:
    """The App's state fields once `action` ended (`app_status`: the App as the run found it): where a success
    leads (`state_after_success`, which also becomes where the app rests), or `error`, which changes nothing
    of where it rests."""
    if not succeeded:
        return {"state": "error"}
    after = state_after_success(action, app_status)
    return {"state": after, **({"restingState": after} if after in RESTING else {})}


class ActionRunSpec(Model):
    app: str = Field(min_length=1, max_length=253, description="The App (same namespace).")
    action: str = Field(min_length=1, max_length=253, description="The action: create, start, stop, restart, "
                        "delete, or a user action of the app's blueprint.")
    arguments: dict[str, str] = Field(
        default_factory=dict, description="Runtime variables of the app for this run (override its inputs)."
    )
    abort: bool = Field(False, description="true: abort the run (running tasks are stopped, the rest not run).")


class Progress(Model):
    done: int = Field(0, description="Task instances finished.")
    total: int = Field(0, description="Task instances in the run.")


class ActionRunStatus(StatusBase):
    state: RunState | None = Field(None, description="Pending, Queued (waiting for one of the operator's run "
                                   "slots: see message), Running, Succeeded, Failed or Aborted.")
    progress: Progress | None = Field(None, description="Task instances done / total.")
    progress_text: str | None = Field(None, description="done/total, for the printer column.")
    start_time: str | None = Field(None, description="When the run started.")
    end_time: str | None = Field(None, description="When it ended.")
    failed_task: str | None = Field(None, description="The failing task, on its replica (task@replica).")
    reason: str | None = Field(None, description="Why the run failed or was aborted.")
    message: str | None = Field(None, description="The run's summary.")
    run_log: list[Any] = Field(
        default_factory=list,
        description="The run log tree: each task with its instance per replica (state, attempts, times, exit "
        "code, message, the tail of its masked output).",
    )
    runner_starts: int | None = Field(None, description="How many times a runner process was started.")
    status_writes: int | None = Field(None, description="Status PATCHes this run cost (progress included).")


COLUMNS = (
    PrinterColumn("App", ".spec.app", description="The app."),
    PrinterColumn("Action", ".spec.action", description="The action."),
    PrinterColumn("State", ".status.state", description="Pending, Queued, Running, Succeeded, Failed or Aborted."),
    PrinterColumn("Progress", ".status.progressText", description="Task instances done/total."),
)


# --- the app and its actions ---------------------------------------------------------------------

_COMPILED: dict[str, tuple[CompiledAction, ...]] = {}


def snapshot_actions(snapshot: Mapping[str, Any]) -> tuple[BlueprintSpec, tuple[CompiledAction, ...]]:
    """The compiled actions of an app's frozen blueprint (compiling is pure: cached by content)."""
    spec = BlueprintSpec.model_validate(snapshot["spec"])
    digest = hashlib.sha256(json.dumps(snapshot, sort_keys=True, default=str).encode()).hexdigest()
    actions = _COMPILED.get(digest)
    if actions is None:
        previous = snapshot.get("compiledState")
        result = compile_blueprint(spec, CompiledState.model_validate(previous) if previous else None)
        actions = _COMPILED[digest] = result.actions
    return spec, actions


def find_action(actions: Sequence[CompiledAction], name: str) -> CompiledAction | None:
    return next((a for a in actions if a.name == name and a.level == "Application"), None)


async def get_app(ctx: StepContext, name: str) -> dict[str, Any] | None:
    return await Objects(ctx.services.kube).find(APP, ctx.obj.namespace, name)


async def patch_app(ctx: StepContext, name: str, status: Mapping[str, Any], resource_version: str | None = None
                    ) -> dict[str, Any]:
    body: dict[str, Any] = {"status": dict(status)}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return await Objects(ctx.services.kube).patch_status(APP, ctx.obj.namespace, name, body)


# --- steps ---------------------------------------------------------------------------------------


@spec_step(ActionRunSpec)
async def validate(ctx: StepContext[ActionRunSpec]) -> Mapping[str, Any]:
    """Init -> Pending: the app exists and has been launched; the action exists."""
    spec = ctx.spec
    if ctx.obj.status.get("state") in FINAL_RUN_STATES:
        return carry(ctx.obj.status)
    app = await get_app(ctx, spec.app)
    if app is None:
        raise PermanentError("AppNotFound", f"spec.app: no app {spec.app} in namespace {ctx.obj.namespace}",
                             facts={"state": "Failed", "reason": f"no app {spec.app}"})
    snapshot = (app.get("status") or {}).get("snapshot")
    if not snapshot:
        raise TemporaryError("AppNotLaunched", f"app {spec.app} has not been launched yet", delay=1.0,
                             facts={"state": "Pending"})
    _, actions = snapshot_actions(snapshot)
    if find_action(actions, spec.action) is None:
        names = ", ".join(sorted({a.name for a in actions if a.level == "Application"}))
        raise PermanentError("UnknownAction", f"spec.action: app {spec.app} has no action {spec.action} "
                             f"(actions: {names})", facts={"state": "Failed", "reason": f"no action {spec.action}"})
    refusal = deleting_refusal(app, ctx.obj.name, spec.action)
    if refusal is not None:
        raise PermanentError("AppDeleting", refusal, facts={"state": "Failed", "reason": refusal})
    return {"state": "Pending"}


def deleting_refusal(app: Mapping[str, Any], run: str, action: str) -> str | None:
    """Why a run may not start on an app being deleted (only the app's own delete run may)."""
    meta = app.get("metadata") or {}
    if not meta.get("deletionTimestamp"):
        return None
    if action == "delete" and run == delete_run_name(str(meta.get("name")), int(meta.get("generation") or 0)):
        return None
    return f"app {meta.get('name')} is being deleted: only its delete run may start"


@spec_step(ActionRunSpec)
async def take_lock(ctx: StepContext[ActionRunSpec]) -> Mapping[str, Any]:
    """Pending -> Running: lock the app (optimistically: a concurrent writer makes this retry)."""
    if ctx.obj.status.get("state") in FINAL_RUN_STATES:
        return carry(ctx.obj.status)
    spec = ctx.spec
    app = await get_app(ctx, spec.app)
    if app is None:
        raise PermanentError("AppNotFound", f"no app {spec.app}", facts={"state": "Failed"})
    status = app.get("status") or {}
    lock = active_lock(status)
    started = ctx.obj.status.get("startTime") or utc_now()
    if lock is not None and lock["lockedBy"] != ctx.obj.name:
        if not await run_holder_gone(ctx.services.kube, ctx.obj.namespace, lock):
            message = f"app {spec.app} is locked by run {lock['lockedBy']}"
            raise PermanentError("Locked", message, facts={"state": "Failed", "reason": message, "endTime": utc_now()})
        log.warning("app %s/%s: run %s holds its lock but is gone; run %s takes it", ctx.obj.namespace, spec.app,
                    lock["lockedBy"], ctx.obj.name)
        lock = None  # a stale lock: nothing would ever release it before its TTL
    if lock is None:
        ttl = int((app.get("spec") or {}).get("lockTtlSeconds") or 3600)
        patch = {"lock": {"lockedBy": ctx.obj.name, "since": utc_now(), "ttlSeconds": ttl},
                 "currentAction": spec.action, "currentRun": ctx.obj.name,
                 "state": state_during(spec.action, status)}
        try:
            await patch_app(ctx, spec.app, patch, (app.get("metadata") or {}).get("resourceVersion"))
        except ApiError as error:
            if error.status == 409:
                raise TemporaryError("LockConflict", "the app changed while taking its lock", delay=0.5) from None
            raise
    return {"state": "Running", "startTime": started}


async def _secret_value(ctx: StepContext, blueprint: str, source: SecretSource, account: AccountCredentials) -> str:
    """A secret's value, at the moment a runner starts.

    A Secret reference is read with the rights of the namespace's service account (`account`: a
    short-lived token of it), wherever the run's scripts run: with the operator's own rights a
    tenant who may not read a Secret of its namespace could name it in a blueprint and have a run
    reveal it. So a namespace reads only what its account may, and the operator needs no right to
    read Secrets at all.

    A vault reference opens only in the run's own namespace and only if the blueprint the app
    was launched from stored it: the `stead.dev/project` label plays no part (anyone may set it).
    """
    if source.vault_ref is not None:
        vault, owner = ctx.services.vault, secret_owner(blueprint)
        try:
            if source.sealed is not None:  # the blueprint's reconcile may not have stored it yet
                await vault.store_sealed(ctx.obj.namespace, source.vault_ref, base64.b64decode(source.sealed), owner)
            # `refreshed`: stored by the replica that reconciled the blueprint, maybe not this one
            return str(await vault.refreshed(ctx.obj.namespace, source.vault_ref, owner=owner))
        except (VaultError, binascii.Error) as error:  # names the uuid and the owner, never a value
            raise PermanentError("SecretNotFound", str(error)) from None
    if source.secret_ref is not None:
        ref = source.secret_ref
        return await read_account_secret(await account(), ctx.obj.namespace, ctx.services.runs.job_service_account,
                                         ref.name, ref.key)
    raise PermanentError("SecretNotFound", "a secret has neither a vault reference nor a Secret reference")


async def _known_hosts(
    ctx: StepContext, blueprint: str, sources: Sequence[KnownHosts], account: AccountCredentials
) -> str:
    """The known_hosts text of the run's Existing substrates (each line names its host), joined."""
    texts = []
    for source in sources:
        if source.value is not None:
            texts.append(source.value)
        elif source.secret_ref is not None:
            texts.append(await _secret_value(ctx, blueprint, SecretSource(secret_ref=source.secret_ref), account))
    return "".join(text if text.endswith("\n") else text + "\n" for text in texts)


class _Run:
    """What one supervision needs about its app, action and workflow."""

    def __init__(self, ctx: StepContext[ActionRunSpec], app: Mapping[str, Any]) -> None:
        self.ctx = ctx
        self.spec = ctx.spec
        self.app = app
        app_status = app.get("status") or {}
        self.blueprint, self.actions = snapshot_actions(app_status["snapshot"])
        action = find_action(self.actions, self.spec.action)
        assert action is not None
        self.action = action
        self.project = project_key(ctx.obj.labels, ctx.obj.namespace)
        entities = app_status.get("entities") or {}
        counts = {d["name"]: len(d.get("replicas") or []) for d in entities.get("deployments") or []}
        self.place = wf.layout(self.blueprint, counts)
        replica_props = {r["name"]: dict(r.get("properties") or {})
                         for d in entities.get("deployments") or [] for r in d.get("replicas") or []}
        self.replica_props = replica_props
        self.app_props = dict(entities.get("properties") or {})
        inputs = {**((app.get("spec") or {}).get("inputs") or {}), **self.spec.arguments}
        snapshot = app_status["snapshot"]
        self.info = wf.AppInfo(
            name=str(app["metadata"]["name"]), uid=str(app["metadata"]["uid"]), project=self.project,
            blueprint_name=str(snapshot.get("name")), blueprint_uid=str(snapshot.get("uid")), inputs=inputs,
            properties=wf.properties_by_entity(replica_props, self.app_props, self.place),
            namespace=ctx.obj.namespace,
        )
        self.built = wf.build_workflow(snapshot["spec"], self.actions, self.action, self.info, self.place)


class _Observer:
    """What an ActionRun shows of its run: progress and the run log tree; it aborts the run when
    `spec.abort` is set or the app's lock (taken for the run) expires."""

    def __init__(self, ctx: StepContext, run: _Run) -> None:
        self.ctx, self.run = ctx, run
        self.lock = ((run.app.get("status") or {}).get("lock")) or {}

    async def abort(self) -> Abort | None:
        with contextlib.suppress(ApiError):
            current = await Objects(self.ctx.services.kube).get(ACTIONRUN, self.ctx.obj.namespace, self.ctx.obj.name)
            if (current.get("spec") or {}).get("abort"):
                return Abort()
        if self.lock and lock_expired(self.lock):
            return Abort(f"the app's lock expired after {self.lock.get('ttlSeconds')}s")
        return None

    def progress_patch(self, status: Mapping[str, Any], progress: Mapping[str, Any]) -> Mapping[str, Any]:
        done = progress.get("progress") or {}
        return {"progress": done, "progressText": f"{done.get('done', 0)}/{done.get('total', 0)}",
                "runLog": wf.run_log(status, self.run.built.data["steps"])}

    def queue_patch(self, waiting: str | None) -> Mapping[str, Any]:
        return {"state": "Queued" if waiting else "Running", "message": waiting}

    async def write(self, patch: Mapping[str, Any]) -> None:
        obj = self.ctx.obj
        await self.ctx.services.kube.patch_status(ACTIONRUN.plural, obj.namespace, obj.name, dict(patch))


@spec_step(ActionRunSpec)
async def supervise(ctx: StepContext[ActionRunSpec]) -> Mapping[str, Any]:
    """Running -> Provisioned: run the action's workflow to its end and record it in both objects."""
    facts = {**carry(ctx.obj.status), **ctx.facts}
    paths = paths_for(ctx)
    concluded = read_conclusion(paths)
    if concluded is not None:  # whatever the body says (an event queued during the run is stale)
        return _finished_again(ctx, {**facts, **concluded})
    progress = read_progress(paths)
    if ctx.obj.status.get("state") in FINAL_RUN_STATES and (progress is None or progress.get("finishedAt")):
        return _finished_again(ctx, facts)
    spec = ctx.spec
    app = await get_app(ctx, spec.app)
    if app is None:
        raise PermanentError("AppNotFound", f"no app {spec.app}", facts={**facts, "state": "Failed"})
    try:
        run = _Run(ctx, app)
    except wf.WorkflowError as error:
        return await _fail_early(ctx, facts, "InvalidAction", str(error))
    blueprint = run.info.blueprint_name
    secrets: dict[str, SecretReader] = {name: functools.partial(_secret_value, ctx, blueprint, source)
                                        for name, source in run.built.secrets.items()}
    if run.built.ssh:
        secrets[wf.SSH_KNOWN_HOSTS] = functools.partial(_known_hosts, ctx, blueprint, run.built.known_hosts)
    request = RunRequest(
        paths, run.built.data, hooks=HOOKS, scripts_on_runner=tuple(run.built.scripts_on_runner),
        secrets=secrets, kube_api=run.built.kube_api)
    try:
        followed = await follow_run(ctx, request, _Observer(ctx, run), starts=int(facts.get("runnerStarts") or 0),
                                    writes=int(facts.get("statusWrites") or 0))
    except UntrustedNamespace as error:
        return await _fail_early(ctx, facts, "UntrustedNamespace", str(error))
    except PermanentError as error:  # a secret the run needs cannot be read: the run fails, the app unlocks
        return await _fail_early(ctx, facts, error.reason, error.message)
    return await _conclude(ctx, run, paths, facts, followed)


def _finished_again(ctx: StepContext, facts: dict[str, Any]) -> Mapping[str, Any]:
    """A spec change (abort: true, say) or a stale event after the end: the result stands."""
    if facts.get("state") != "Succeeded":
        reason = str(facts.get("reason") or facts.get("state"))
        task = facts.get("failedTask")
        raise PermanentError("Run" + str(facts.get("state")), f"{task}: {reason}" if task else reason, facts=facts)
    return facts


async def _fail_early(ctx: StepContext[ActionRunSpec], facts: dict[str, Any], reason: str, message: str
                      ) -> Mapping[str, Any]:
    spec = ctx.spec
    at = utc_now()
    await _release(ctx, spec, {"state": "error", "lastRun": ctx.obj.name, "failure": {
        "run": ctx.obj.name, "action": spec.action, "reason": message, "at": at}})
    raise PermanentError(reason, message, facts={**facts, "state": "Failed", "reason": message, "endTime": at})


async def _release(ctx: StepContext, spec: ActionRunSpec, fields: Mapping[str, Any]) -> None:
    """Unlock the app (if this run holds it) and record the outcome. Only an app gone meanwhile (404) is
    passed over: any other failure (the API server away, this replica's claim on the project lost
    mid-step: 403 from the shard guard) propagates, so that the step is tried again before the run's
    conclusion is written; a retry after the conclusion would never come back here, and the app stayed
    locked by a finished run, its ServiceInstance waiting for it for ever (found by bench/soak.py)."""
    app = await get_app(ctx, spec.app)
    if app is None:
        return
    lock = (app.get("status") or {}).get("lock") or {}
    if lock.get("lockedBy") not in (None, ctx.obj.name):
        return
    patch = {"lock": None, "currentAction": None, "currentRun": None, **fields}
    try:
        await patch_app(ctx, spec.app, patch)
    except ApiError as error:
        if error.status != 404:
            raise


def end_time(status: Mapping[str, Any], progress: Mapping[str, Any]) -> str:
    """When the run ended by the runner's own clock: the operator may learn of it much later (after
    an API-server outage, say), and that moment is not when the run ended."""
    ended = status.get("finishedAt") or progress.get("finishedAt")
    return utc_seconds(str(ended)) if ended else utc_now()


async def _conclude(ctx: StepContext, run: _Run, paths: RunPaths, facts: dict[str, Any],
                    followed: Followed) -> Mapping[str, Any]:
    status, progress, aborted_for = followed.status, followed.progress, followed.aborted_for
    tree = wf.run_log(status, run.built.data["steps"])
    phase = str(status.get("phase") or progress.get("phase") or "Failed")
    if aborted_for is not None or phase not in FINAL_RUN_STATES:
        phase = "Failed"
    done = status.get("progress") or progress.get("progress") or {}
    at = end_time(status, progress)
    failure = wf.first_failure(tree)
    reason = aborted_for or (failure[1] if failure else str(status.get("message") or phase))
    result = {**facts, "state": phase, "progress": done,
              "progressText": f"{done.get('done', 0)}/{done.get('total', 0)}", "runLog": tree,
              "endTime": at, "message": str(status.get("message") or ""), "runnerStarts": followed.starts,
              "statusWrites": followed.writes + 1, "failedTask": failure[0] if failure else None,
              "reason": None if phase == "Succeeded" else reason}
    # the entities at the point of the end (or of the failure): properties set by successful steps
    replica_props, app_props = wf.entity_properties(status, run.built.steps, run.place)
    failed_targets = {inst.get("target") for task in tree for inst in task["replicas"] if inst["state"] == "failure"}
    entities = (run.app.get("status") or {}).get("entities") or {}
    deployments = []
    for d in entities.get("deployments") or []:
        replicas = []
        for r in d.get("replicas") or []:
            props = {**(r.get("properties") or {}), **replica_props.get(r["name"], {})}
            state = "error" if r["name"] in failed_targets else (
                "running" if phase == "Succeeded" else r.get("state"))
            replicas.append({**r, "properties": props, **({"state": state} if state else {})})
        deployments.append({**d, "replicas": replicas})
    new_entities = {**entities, "deployments": deployments,
                    "properties": {**(entities.get("properties") or {}), **app_props}}
    spec = run.spec
    app_fields = app_state_fields(spec.action, run.app.get("status") or {}, phase == "Succeeded")
    if phase == "Succeeded":
        fields: dict[str, Any] = {**app_fields, "entities": new_entities, "lastRun": ctx.obj.name, "failure": None}
    else:
        fields = {**app_fields, "entities": new_entities, "lastRun": ctx.obj.name,
                  "failure": {"run": ctx.obj.name, "action": spec.action, "task": result["failedTask"],
                              "reason": reason, "at": at}}
    await _release(ctx, spec, fields)
    write_conclusion(paths, {k: v for k, v in result.items() if k not in RUNTIME_FIELDS})
    if phase == "Succeeded":
        return result
    raise PermanentError("Run" + phase, reason if not result["failedTask"] else f"{result['failedTask']}: {reason}",
                         facts=result)


# --- admission -------------------------------------------------------------------------------------


@spec_admission(ActionRunSpec)
async def admission(request: AdmissionRequest[ActionRunSpec]) -> None:
    """A run on a locked app is refused (423); only `abort` may change after creation."""
    spec = request.parsed
    if request.operation == "UPDATE" and request.old is not None:
        old = dict(request.old.get("spec") or {})
        new = dict(request.spec)
        old.pop("abort", None)
        new.pop("abort", None)
        if ActionRunSpec.model_validate(old) != ActionRunSpec.model_validate(new):
            raise Refusal("spec: only spec.abort may change once a run is created")
        return
    services = request.services
    if services is None:
        return
    try:
        app = await Objects(services.kube).get(APP, request.namespace, spec.app)
    except ApiError as error:
        if error.status == 404:
            raise Refusal(f"spec.app: no app {spec.app} in namespace {request.namespace}") from None
        raise
    status = app.get("status") or {}
    refusal = deleting_refusal(app, request.name, spec.action)
    if refusal is not None:
        raise Refusal(refusal, code=409)
    lock = active_lock(status)
    if lock is not None and lock["lockedBy"] != request.name and not await run_holder_gone(
            services.kube, request.namespace, lock):
        raise Refusal(f"app {spec.app} is locked by run {lock['lockedBy']}", code=423)
    snapshot = status.get("snapshot")
    if snapshot:
        blueprint, actions = snapshot_actions(snapshot)
        if find_action(actions, spec.action) is None:
            names = ", ".join(sorted({a.name for a in actions if a.level == "Application"}))
            raise Refusal(f"spec.action: app {spec.app} has no action {spec.action} (actions: {names})")
        from operators.calm.app import input_problems

        problems = input_problems(blueprint, spec.arguments, field="spec.arguments")
        problems = [p for p in problems if "required" not in p]
        if problems:
            raise Refusal("; ".join(problems))


KIND = Kind(
    kind=ACTIONRUN.kind,
    plural=ACTIONRUN.plural,
    short_names=ACTIONRUN_SHORT_NAMES,
    description="One run of an action on an App: progress, the run log tree per task and replica, and the "
    "failing task with its reason. Set spec.abort to abort it.",
    spec_model=ActionRunSpec,
    status_model=ActionRunStatus,
    pipeline=run_pipeline(("Init", "Pending", "Running", "Provisioned"),
                          {"Init": validate, "Pending": take_lock, "Running": supervise}),
    columns=COLUMNS,
    admission=admission,
)

__all__ = ["APP_LABEL", "KIND"]
