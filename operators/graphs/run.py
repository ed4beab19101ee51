"""A GraphRun, from its checks to its end: `Init -> Planning -> Running -> Provisioned` (a run that failed or
was aborted, at whatever step: phase `Failed` or `Aborted`, `runs.run_pipeline`).

- Init: the environment exists and says how to reach its nodes (`spec.ssh`, unless a dry run), and
  no other run is going on it (the admission webhook refuses the second with 409; this catches a
  run that bypassed it).
- Planning: a type the environment has no graph of fails the run (`UnknownGraphType`, naming the types
  it has: planned, it would run nothing and succeed). The merged graph of each type the run names
  (release < the environment's plugins < the environment: the Environment's kept merge while it is
  current, else merged from the current graphs; `operators.graphs.kept`) is expanded over the
  environment's nodes and planned (conditions evaluated over each node's effective configuration, from
  the configuration store) by a planner process under CPU, memory and wall limits
  (`operators.graphs.planner`: tenants' expressions never run in the operator's event loop). The plan,
  the workflow and the data the conditions read are written to the run's directory, so that an operator
  restart follows the same plan rather than a new one. A dry run ends here.
- Running: the workflow runs under the shared supervision (`operators.runtime.engine.runs`): a
  runner process of its own, restarted from its finished steps when it dies, aborted on
  `spec.abort`, its progress in status at most once a second. A success records the nodes' data
  as the environment's last successful run (the base of Fuel's change functions next time).

The status lists every node's task instances with their state, times and attempts, up to
`planner.STATUS_INSTANCES` of them (a status must stay far below etcd's object size whatever the graph);
the rest are counted in `omitted`, and every one is in the run's records (`stead graph status`).
Output tails are kept for failed instances only, for the same reason.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import lmdb
from pydantic import ValidationError

from operators.config.levels import NODE_LEVEL, ROLE_LEVEL, node_ident
from operators.config.merge import effective
from operators.config.repository import KubeConfigRepository, Snapshot
from operators.environment import KIND as ENVIRONMENT_KIND
from operators.environment.models import ENVIRONMENT, EnvironmentSpec, SshAccess
from operators.graphs.history import FINISHED, HistoryStore, drop_others, entries_from_records, history_path
from operators.graphs.kept import MergedGraphStore, SourceGraph, graph_types, no_such_type, plan_input
from operators.graphs.merge import MergeError
from operators.graphs.models import (
    DEPLOYMENT_GRAPH,
    GRAPH_RUN,
    OUTPUT_TAIL,
    DeploymentGraphSpec,
    GraphRunSpec,
)
from operators.graphs.output import PLAN_FILE, read_plan
from operators.graphs.planner import PlanFailed, instances_status, plan_in_process
from operators.runtime import (
    FINAL_RUN_STATES,
    RUNNER_CREDENTIALS,
    RUNTIME_FIELDS,
    Abort,
    AccountCredentials,
    AdmissionRequest,
    ApiError,
    Followed,
    Objects,
    PermanentError,
    Refusal,
    Requester,
    RunRequest,
    SecretKeyRef,
    StepContext,
    follow_run,
    parse_spec,
    paths_for,
    read_account_secret,
    read_conclusion,
    runner_credentials,
    spec_step,
    utc_now,
    utc_seconds,
    write_conclusion,
)
from pipelines.control import read_progress
from pipelines.paths import RunPaths

log = logging.getLogger(__name__)

LAST_DATA_DIR = "graph-data"
"""Under the runs' state directory: `<namespace>/<environment>.json`, the nodes' data of the environment's
last successful run. On this replica's volume: lost with it, after which every change function is true
(the safe side: tasks run rather than being skipped)."""
KEY_SECRET = "ssh_private_key"


def carry(status: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in status.items() if key not in RUNTIME_FIELDS}


async def _environment_object(ctx: StepContext, name: str) -> dict[str, Any]:
    body = await Objects(ctx.services.kube).find(ENVIRONMENT, ctx.obj.namespace, name)
    if body is None:
        raise PermanentError("EnvironmentNotFound", f"spec.environment: no Environment {name!r} in namespace "
                             f"{ctx.obj.namespace}", facts={"state": "Failed", "reason": f"no environment {name}"})
    return body


def _environment_spec(name: str, body: Mapping[str, Any]) -> EnvironmentSpec:
    try:
        return ENVIRONMENT_KIND.parse(body.get("spec") or {})
    except ValidationError:
        raise PermanentError("EnvironmentInvalid", f"Environment {name} has an invalid spec (see its status)",
                             facts={"state": "Failed"}) from None


async def _environment(ctx: StepContext, name: str) -> EnvironmentSpec:
    return _environment_spec(name, await _environment_object(ctx, name))


async def others_running(kube: Requester, namespace: str, environment: str, name: str) -> list[str]:
    """The GraphRuns on `environment` other than `name` that have not ended."""
    return sorted(str(item["metadata"]["name"]) for item in await Objects(kube).list(GRAPH_RUN, namespace)
                  if (item.get("spec") or {}).get("environment") == environment
                  and item["metadata"]["name"] != name
                  and not item["metadata"].get("deletionTimestamp")
                  and (item.get("status") or {}).get("state") not in FINAL_RUN_STATES)


@spec_step(GraphRunSpec)
async def validate(ctx: StepContext[GraphRunSpec]) -> Mapping[str, Any]:
    """Init -> Planning: the environment, how to reach its nodes, and no other run on it."""
    if ctx.obj.status.get("state") in FINAL_RUN_STATES:
        return carry(ctx.obj.status)
    spec = ctx.spec
    env = await _environment(ctx, spec.environment)
    if env.ssh is None and not spec.dry_run:
        message = (f"spec.environment: Environment {spec.environment} has no spec.ssh (the user, key and known host "
                   "keys tasks reach its nodes with); a dryRun needs none")
        raise PermanentError("NoSshAccess", message, facts={"state": "Failed", "reason": message})
    busy = await others_running(ctx.services.kube, ctx.obj.namespace, spec.environment, ctx.obj.name)
    if busy:
        message = f"GraphRun {busy[0]} runs on environment {spec.environment}: one run at a time"
        raise PermanentError("EnvironmentBusy", message, facts={"state": "Failed", "reason": message})
    return {"state": "Pending", "startTime": ctx.obj.status.get("startTime") or utc_now()}


async def source_graphs(kube: Requester, namespace: str) -> list[SourceGraph]:
    """The namespace's DeploymentGraphs that are valid (an invalid one is Stalled, saying why), as the API
    server holds them now."""
    graphs = []
    for item in await Objects(kube).list(DEPLOYMENT_GRAPH, namespace):
        with contextlib.suppress(ValidationError):
            meta = item.get("metadata") or {}
            graphs.append(SourceGraph(str(meta.get("name")), int(meta.get("generation") or 0),
                                      parse_spec(DeploymentGraphSpec, item.get("spec") or {})))
    return graphs


def node_point(env: EnvironmentSpec, node: Any) -> tuple[tuple[str, str], ...]:
    """Where a node sits in the hierarchy: the role level is its first role (its primary one), the node
    level its FQDN or name; the walk stops at a level a node gives no value for."""
    point: list[tuple[str, str]] = []
    for level in env.hierarchy_levels:
        if level == ROLE_LEVEL:
            point.append((level, node.roles[0]))
        elif level == NODE_LEVEL:
            point.append((level, node_ident(node)))
        else:
            break
    return tuple(point)


async def node_data(ctx: StepContext, environment: str, env: EnvironmentSpec) -> dict[str, dict[str, Any]]:
    """Each node's effective configuration: resource name -> its effective values at the node's point
    (what `stead config get` shows for the node), plus `node` (name, roles, fqdn) and `nodes`."""
    snapshot = await KubeConfigRepository(ctx.services.kube).snapshot(ctx.obj.namespace, environment)
    everyone = [{"name": n.name, "roles": list(n.roles), "fqdn": n.fqdn} for n in env.nodes]
    values = values_by_node(env, snapshot)
    return {node.name: {**values[node.name], "node": {"name": node.name, "roles": list(node.roles),
                                                      "fqdn": node.fqdn}, "nodes": everyone}
            for node in env.nodes}


def values_by_node(env: EnvironmentSpec, snapshot: Snapshot | None,
                   resources: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """Each node's effective values (node name -> resource -> values) of `resources` (None: every resource
    the environment's components define): what a condition reads as `$.<resource>` on the node."""
    if snapshot is None:
        return {node.name: {} for node in env.nodes}
    defined = sorted({r.name for c in snapshot.components.values() for r in c.resources})
    names = [r for r in defined if resources is None or r in resources]
    layers = {r: snapshot.layers(r) for r in names}
    return {node.name: {r: effective(node_point(env, node), layers[r]).values for r in names} for node in env.nodes}


def _last_data_path(ctx: StepContext, environment: str) -> Path:
    return Path(ctx.services.runs.state_dir) / LAST_DATA_DIR / ctx.obj.namespace / f"{environment}.json"


def read_last_data(path: Path) -> dict[str, dict[str, Any]] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


async def _read_secret(ctx: StepContext, ref: SecretKeyRef, what: str, credentials: Path | None = None) -> str:
    """A key of a Secret of the run's own namespace, read as the namespace's service account (a token of it
    minted for the run, as script Jobs get; `credentials` when the runner's start minted one): the operator
    needs no right to read tenants' Secrets, and a namespace reads only what its own account may."""
    if credentials is None:
        paths = paths_for(ctx)
        await runner_credentials(ctx, paths)
        credentials = paths.run_dir / RUNNER_CREDENTIALS
    try:
        return await read_account_secret(credentials, ctx.obj.namespace, ctx.services.runs.job_service_account,
                                         ref.name, ref.key)
    except PermanentError as error:  # which of the environment's Secrets, and the run is over
        message = f"{what}: {error.message}"
        raise PermanentError(error.reason, message, facts={"state": "Failed", "reason": message[:4096]}) from None


def _instances_status(index: Mapping[str, Sequence[str]], records: Mapping[str, Mapping[str, Any]],
                      planned: Mapping[str, Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Per node, per task: the plan's state, then the run's record over it; bounded (see the module)."""
    return instances_status(index, records, planned, OUTPUT_TAIL)


def _records(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(r.get("step")): r for r in status.get("steps") or []}


@spec_step(GraphRunSpec)
async def plan(ctx: StepContext[GraphRunSpec]) -> Mapping[str, Any]:
    """Planning -> Running: merge, expand and plan; write the plan beside the run (a restart follows it)."""
    facts = {**carry(ctx.obj.status), **ctx.facts}
    if facts.get("state") in FINAL_RUN_STATES:
        return facts
    paths = paths_for(ctx)
    saved = read_plan(paths.run_dir)
    if saved is not None:  # planned before a restart: the same plan, never a new one
        return {**facts, **saved["facts"], "state": saved["facts"].get("state", "Running")}
    spec = ctx.spec
    env_body = await _environment_object(ctx, spec.environment)
    env = _environment_spec(spec.environment, env_body)
    generation = int((env_body.get("metadata") or {}).get("generation") or 0)
    graphs = await source_graphs(ctx.services.kube, ctx.obj.namespace)
    store = getattr(ctx.services, "store", None)
    kept = MergedGraphStore(store).of_environment(ctx.obj.namespace, spec.environment) if store is not None else {}
    failed = {"state": "Failed", "endTime": utc_now()}
    types = graph_types(spec.environment, env, (g.spec for g in graphs))
    for index, selection in enumerate(spec.graphs):
        problem = no_such_type(spec.environment, selection.type, types)
        if problem:
            message = f"spec.graphs[{index}].type: {problem}"
            raise PermanentError("UnknownGraphType", message, facts={**facts, **failed, "reason": message})
    try:
        merged: dict[str, list[Any]] = {}
        for selection in spec.graphs:
            tasks, was_kept = plan_input(kept.get(selection.type), spec.environment, env, generation, graphs,
                                         selection.type)
            merged[selection.type] = tasks
            log.info("GraphRun %s/%s: the %r graph of environment %s %s", ctx.obj.namespace, ctx.obj.name,
                     selection.type, spec.environment, "as kept in the store" if was_kept else
                     "merged from the current graphs (the kept merge is not current)")
        data = await node_data(ctx, spec.environment, env)
        last = None if spec.force else read_last_data(_last_data_path(ctx, spec.environment))
        access = env.ssh or SshAccess.model_validate({"privateKey": {"name": "x", "key": "x"},
                                                      "knownHosts": {"name": "x", "key": "x"}})
        nodes = [{**node.model_dump(by_alias=True, exclude_none=True), "sshPort": str(access.port),
                  "sshUser": access.user} for node in env.nodes]
    except MergeError as error:
        message = str(error)[:4096]
        raise PermanentError("PlanFailed", message, facts={**facts, **failed, "reason": message}) from None
    payload = {"spec": dict(ctx.obj.spec), "nodes": nodes, "nodeData": data, "lastData": last,
               "merged": {t: [task.model_dump(mode="json", by_alias=True, exclude_defaults=True) for task in tasks]
                          for t, tasks in merged.items()},
               "privateKeyRef": KEY_SECRET, "name": f"{ctx.obj.namespace}/{ctx.obj.name}"}
    paths.run_dir.mkdir(parents=True, exist_ok=True)

    async def known_hosts() -> dict[str, str]:
        """Read once the plan holds (a plan that fails reads no Secret)."""
        if spec.dry_run or env.ssh is None:
            return {"ssh_known_hosts": ""}
        return {"ssh_known_hosts": await _read_secret(ctx, env.ssh.known_hosts,
                                                      "spec.ssh.knownHosts of the environment")}

    try:
        plan_facts = await plan_in_process(payload, paths.run_dir / PLAN_FILE, known_hosts)
    except PlanFailed as error:
        raise PermanentError(error.reason, error.message, facts={**facts, **failed, "reason": error.message}) from None
    return {**facts, **plan_facts, "state": plan_facts.get("state", "Running")}


def record_history(ctx: StepContext, saved: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
                   seen: set[str], environment_uid: str) -> None:
    """Add the run's instances that finished since the last call (not in `seen`) to the history of the
    Environment `environment_uid` (`operators.graphs.history`; an Environment of the same name before it is
    another's: its history is dropped). A history that cannot be written is logged, never the run's
    failure: the run's own records hold what it did."""
    fresh = {sid: r for sid, r in records.items() if sid not in seen and r.get("state") in FINISHED}
    if not fresh:
        return
    environment = str(ctx.obj.spec.get("environment") or "")
    try:
        path = history_path(Path(ctx.services.runs.state_dir), ctx.obj.namespace, environment, environment_uid)
        drop_others(path)
        store = HistoryStore(path)
        store.record(entries_from_records(ctx.obj.name, ctx.obj.uid, saved["index"], fresh, saved["planned"]))
    except (OSError, ValueError, lmdb.Error) as error:
        log.warning("GraphRun %s/%s: its history could not be recorded: %s", ctx.obj.namespace, ctx.obj.name, error)
        return
    seen.update(fresh)


class _Observer:
    """What a GraphRun shows of its run: progress and its nodes' task states; aborts on `spec.abort`. Each
    instance that finished is recorded in the environment's history when the status reports it."""

    def __init__(self, ctx: StepContext, saved: Mapping[str, Any], environment_uid: str) -> None:
        self.ctx, self.saved, self.environment_uid = ctx, saved, environment_uid
        self.recorded: set[str] = set()

    async def abort(self) -> Abort | None:
        with contextlib.suppress(ApiError):
            current = await Objects(self.ctx.services.kube).find(GRAPH_RUN, self.ctx.obj.namespace, self.ctx.obj.name)
            if current is not None and (current.get("spec") or {}).get("abort"):
                return Abort()
        return None

    def progress_patch(self, status: Mapping[str, Any], progress: Mapping[str, Any]) -> Mapping[str, Any]:
        records = _records(status)
        record_history(self.ctx, self.saved, records, self.recorded, self.environment_uid)
        nodes, omitted = _instances_status(self.saved["index"], records, self.saved["planned"])
        return {"progress": _progress_text(self.saved, status, progress), "nodes": nodes, "omitted": omitted or None}

    def queue_patch(self, waiting: str | None) -> Mapping[str, Any]:
        return {"state": "Pending" if waiting else "Running", "reason": waiting}

    async def write(self, patch: Mapping[str, Any]) -> None:
        obj = self.ctx.obj
        await self.ctx.services.kube.patch_status(GRAPH_RUN.plural, obj.namespace, obj.name, dict(patch))


def _progress_text(saved: Mapping[str, Any], status: Mapping[str, Any], progress: Mapping[str, Any]) -> str:
    """Planned instances done / planned instances (noop and skipped ones are not work). Done is succeeded: a
    failed or aborted instance did not do its work, so a run that failed never shows all of it done."""
    work = [sid for sid, item in saved["planned"].items() if item["state"] == "planned"]
    records = _records(status)
    done = sum(1 for sid in work if (records.get(sid) or {}).get("state") == "success")
    return f"{done}/{len(work)}"


@spec_step(GraphRunSpec)
async def supervise(ctx: StepContext[GraphRunSpec]) -> Mapping[str, Any]:
    """Running -> Provisioned: run the plan's workflow to its end."""
    facts = {**carry(ctx.obj.status), **ctx.facts}
    spec = ctx.spec
    paths = paths_for(ctx)
    concluded = read_conclusion(paths)
    if concluded is not None:
        return _finished(ctx, {**facts, **concluded})
    progress = read_progress(paths)
    if facts.get("state") in FINAL_RUN_STATES and (spec.dry_run or progress is None or progress.get("finishedAt")):
        return _finished(ctx, facts)
    saved = read_plan(paths.run_dir)
    if saved is None:
        raise PermanentError("PlanLost", "the run's plan is gone from the operator's volume: create a new GraphRun",
                             facts={**facts, "state": "Failed", "reason": "plan lost"})
    body = await _environment_object(ctx, spec.environment)
    env = _environment_spec(spec.environment, body)
    environment_uid = str((body.get("metadata") or {}).get("uid") or "")
    if env.ssh is None:
        raise PermanentError("NoSshAccess", f"Environment {spec.environment} has no spec.ssh any more",
                             facts={**facts, "state": "Failed", "reason": "no spec.ssh"})
    key = functools.partial(_key_reader, ctx, env.ssh.private_key)
    request = RunRequest(paths, saved["workflow"], secrets={KEY_SECRET: key})
    followed = await follow_run(ctx, request, _Observer(ctx, saved, environment_uid),
                                starts=int(facts.get("runnerStarts") or 0), writes=int(facts.get("statusWrites") or 0))
    return await _conclude(ctx, spec, saved, paths, facts, followed, environment_uid)


async def _key_reader(ctx: StepContext, ref: SecretKeyRef, account: AccountCredentials) -> str:
    return await _read_secret(ctx, ref, "spec.ssh.privateKey of the environment", await account())


async def _conclude(ctx: StepContext, spec: GraphRunSpec, saved: Mapping[str, Any], paths: RunPaths,
                    facts: dict[str, Any], followed: Followed, environment_uid: str) -> Mapping[str, Any]:
    status, progress = followed.status, followed.progress
    state = str(status.get("phase") or progress.get("phase") or "Failed")
    if followed.aborted_for is not None or state not in FINAL_RUN_STATES:
        state = "Failed"
    records = _records(status)
    record_history(ctx, saved, records, set(), environment_uid)
    nodes, omitted = _instances_status(saved["index"], records, saved["planned"])
    failed = next(((sid, r) for sid, r in records.items() if r.get("state") == "failure"), None)
    failed_task = None
    reason = followed.aborted_for
    if failed is not None:
        task, node = saved["index"].get(failed[0], [failed[0], ""])
        failed_task = f"{task}@{node}" if node else task
        reason = reason or str(failed[1].get("message") or "failed")
    ended = status.get("finishedAt") or progress.get("finishedAt")
    result = {**facts, "state": state, "nodes": nodes, "omitted": omitted or None,
              "progress": _progress_text(saved, status, progress), "failedTask": failed_task,
              "reason": None if state == "Succeeded" else (reason or str(status.get("message") or state))[:4096],
              "endTime": utc_seconds(str(ended)) if ended else utc_now(),
              "runnerStarts": followed.starts, "statusWrites": followed.writes + 1}
    if state == "Succeeded":
        write_json(_last_data_path(ctx, spec.environment), saved.get("nodeData") or {})
    write_conclusion(paths, {k: v for k, v in result.items() if k not in RUNTIME_FIELDS})
    return _finished(ctx, result)


def _finished(ctx: StepContext, facts: dict[str, Any]) -> Mapping[str, Any]:
    """The run is over: Ready when it succeeded, Stalled (with the failing task) when not."""
    if facts.get("state") == "Succeeded":
        return facts
    task, reason = facts.get("failedTask"), str(facts.get("reason") or facts.get("state"))
    raise PermanentError("Run" + str(facts.get("state")), f"{task}: {reason}" if task else reason, facts=facts)


# --- admission ---------------------------------------------------------------------------------------


async def admission(request: AdmissionRequest) -> None:
    """One run at a time per environment (409 naming the running one); after creation only `abort` changes."""
    if request.operation == "UPDATE" and request.old is not None:
        old = dict(request.old.get("spec") or {})
        changed = sorted(k for k in {*old, *request.spec} if k != "abort" and old.get(k) != request.spec.get(k))
        if changed:
            raise Refusal(f"spec.{changed[0]}: a GraphRun's spec cannot change once created (only spec.abort may): "
                          "create a new GraphRun", 422)
        return
    if request.operation != "CREATE" or request.services is None:
        return
    environment = str(request.spec.get("environment") or "")
    busy = await others_running(request.services.kube, request.namespace, environment, request.name)
    if busy:
        raise Refusal(f"spec.environment: GraphRun {busy[0]} runs on environment {environment}: one run at a time "
                      "(abort it with spec.abort: true, or wait for it)", 409)
