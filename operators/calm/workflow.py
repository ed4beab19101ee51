"""From a compiled action of an App to a `pipelines.Workflow`, and from a finished run back to the
App's entities and the run log tree. Pure: no Kubernetes, no vault, no I/O.

How an action becomes a workflow (as Calm turns a runbook into a workflow; docs/calm.md):

- One machine per replica: a deployment's replicas are the workflow's *targets* (`db_tier-0`), and
  every entity of the deployment (its substrate, packages, services) runs its tasks there. A task
  on an entity runs once per replica of the entity's deployment; a task of the application (no
  target) runs once, on the runner.
- Every compiled task is a step (`DB/init` becomes step `DB.init`). A callRunbook task is a `noop`
  step that finishes after all its children: its children wait for whatever the callRunbook task
  waits for, and whatever waits for it waits for all of them. So an edge between two callRunbook
  tasks orders everything inside them, as Calm's orchestration edges do.
- Macros are decided as the compiler decided (`macros.partial_render`): what is known before the
  run (inputs, arguments, properties set by earlier runs, built-ins of the app) is resolved now;
  what a task of this action sets, secrets, the moment, and `calm_array_index` (one value per
  replica) are kept and rendered by the runner when the step starts (`operators.calm.runhooks`).
- Secrets stay references here (`Workflow.secrets`): the caller seals their values for the run.
- Where a task runs follows its deployment's substrate. On an `Existing` substrate, exec and setvar
  tasks (and the substrate's own `connect` step and exec readiness check) are `ssh.exec` and
  `ssh.setvar` steps on the machine: each replica target carries `ssh_address`, `ssh_port` and
  `ssh_user` (the credential's username); the credential's key is the workflow secret
  `ssh_private_key` and the substrates' known hosts the secret `ssh_known_hosts` (the caller reads
  both when the runner starts; a host key not listed fails the step). On a `Kubernetes` substrate,
  the generated `apply` and `remove` steps are `kubernetes` steps that apply or delete the rendered
  manifest in the App's namespace. Objects of other namespaces and well-known cluster-scoped kinds
  are refused here when the manifest says so before the run; the runner checks the objects again
  as rendered, right before it sends them, by API discovery (`namespaceOnly`), and acts with the
  namespace's service account, whose rights are a second boundary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from operators.calm import macros
from operators.calm.models import BlueprintSpec, CompiledAction, CompiledTask, KnownHosts, SecretSource, Substrate
from operators.runtime import parse_spec
from pipelines.executors.kube import CLUSTER_SCOPED

APPLICATION = "Application"
LAYOUT_VARIABLE = "calm.layout"
"""A workflow variable (not an environment name, so never exported to scripts) that tells the runner's
render hook which replicas hold each entity's properties."""
TARGET_VARIABLE = "calm_target"
INDEX_VARIABLE = "calm_array_index"
SCRIPT_TYPES = {"shell": "sh", "python": "python"}
RUNNABLE = {"exec", "setvar", "http", "delay", "callRunbook"}
SSH_PRIVATE_KEY = "ssh_private_key"
"""The workflow secret ssh steps log in with (the Existing substrates' credential's key)."""
SSH_KNOWN_HOSTS = "ssh_known_hosts"
"""The workflow secret ssh steps check host keys against (the Existing substrates' knownHosts, joined)."""
SSH_TYPES = {"exec": "ssh.exec", "setvar": "ssh.setvar", "ssh": "ssh.exec"}
CONNECT_SCRIPT = 'echo "connected to $(uname -n)"'
"""What an Existing substrate's `connect` step runs: it proves the host key and the login early."""
KUBERNETES_TIMEOUT = 600
"""Seconds a Kubernetes substrate's apply or delete may wait for its objects (unless the task says)."""


class WorkflowError(ValueError):
    """The action cannot be turned into a workflow (a macro without a value, an unsupported task)."""


@dataclass(frozen=True)
class Layout:
    """Where each entity runs: deployment -> replica targets, entity -> deployment, entity -> kind."""

    replicas: Mapping[str, tuple[str, ...]]
    deployment_of: Mapping[str, str]
    kind_of: Mapping[str, str]

    def targets_of(self, entity: str | None) -> list[str]:
        if entity is None:
            return []
        deployment = self.deployment_of.get(entity)
        return list(self.replicas.get(deployment, ())) if deployment else []

    def prefixes(self) -> dict[str, str]:
        """Namespace (``Service_DB_``) -> deployment, for the runner's hook."""
        return {macros.namespace(kind, name): self.deployment_of[name]  # type: ignore[arg-type]
                for name, kind in self.kind_of.items() if name in self.deployment_of}


def replica_name(deployment: str, index: int) -> str:
    name = f"{deployment}-{index}"
    return name if name[0].isalnum() else f"r{name}"


def layout(spec: BlueprintSpec, replicas: Mapping[str, int] | None = None) -> Layout:
    """The replicas of each deployment (its default count unless `replicas` says otherwise)."""
    counts = dict(replicas or {})
    out: dict[str, tuple[str, ...]] = {}
    deployment_of: dict[str, str] = {}
    kind_of: dict[str, str] = {}
    for d in spec.deployments:
        count = counts.get(d.name, d.replicas[1])
        out[d.name] = tuple(replica_name(d.name, i) for i in range(count))
        for name, kind in ((d.name, "Deployment"), (d.substrate, "Substrate"),
                           *((p, "Package") for p in d.packages), *((s, "Service") for s in d.services)):
            deployment_of.setdefault(name, d.name)
            kind_of[name] = kind
    return Layout(out, deployment_of, kind_of)


@dataclass(frozen=True)
class AppInfo:
    """What an App contributes to its macros: names, inputs, and the properties set so far."""

    name: str
    uid: str
    project: str
    blueprint_name: str
    blueprint_uid: str
    inputs: Mapping[str, str] = field(default_factory=dict)
    properties: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """entity name (or "Application") -> attribute -> value (replicas' values joined with ",")."""
    namespace: str = ""
    """The App's namespace: where a Kubernetes substrate's objects go."""


@dataclass(frozen=True)
class Built:
    """A workflow definition without its secret values, and what the caller must supply."""

    data: dict[str, Any]
    secrets: dict[str, SecretSource]  # workflow secret name -> where its value comes from
    steps: dict[str, CompiledTask]  # step id -> the compiled task
    scripts_on_runner: tuple[str, ...]  # substrates/entities whose scripts run on the runner's host
    known_hosts: tuple[KnownHosts, ...] = ()  # the value of the secret SSH_KNOWN_HOSTS: these, joined
    kube_api: bool = False  # kubernetes steps: the runner needs the namespace's service account

    @property
    def ssh(self) -> bool:
        """Whether some step reaches a machine over SSH."""
        return SSH_PRIVATE_KEY in self.secrets


def step_id(task_id: str) -> str:
    out = task_id.replace("/", ".")
    return out if out[:1].isalnum() else f"t{out}"


def _lookup(spec: Mapping[str, Any], source: str) -> Any:
    """The object at a compiled task's `source` ("spec.services[0].actions[0].tasks[1]")."""
    node: Any = {"spec": spec}
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", source):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


def sets_of(task: Mapping[str, Any]) -> list[str]:
    """The attributes a task (as written in the spec) sets."""
    if task.get("type") == "setvar":
        return [str(v) for v in task.get("variables") or []]
    if task.get("type") == "http":
        return [str(v["name"]) for v in (task.get("http") or {}).get("responseVariables") or []]
    return []


def macro_context(spec: BlueprintSpec, spec_data: Mapping[str, Any], actions: Sequence[CompiledAction],
                  app: AppInfo) -> tuple[macros.MacroContext, dict[str, SecretSource]]:
    """The App's macro context: every entity with its values (inputs and properties set so far
    included), every attribute a task sets somewhere (None until known); and the secrets by the
    name the runner looks them up with."""
    attrs: dict[str, dict[str, macros.AttributeValue]] = {}
    secrets: dict[str, SecretSource] = {}

    def declare(owner: str, kind: str, variables: Iterable[Any], overrides: Mapping[str, str] = {}) -> None:
        here = attrs.setdefault(owner, {})
        for var in variables:
            if var.type == "secret" and var.secret is not None:
                key = f"{APPLICATION}.{var.name}" if owner == APPLICATION else \
                    macros.namespaced_name(kind, owner, var.name)  # type: ignore[arg-type]
                here[var.name] = macros.Secret(key)
                secrets[key] = var.secret
            else:
                here[var.name] = overrides.get(var.name, var.value)

    declare(APPLICATION, APPLICATION, spec.variables, app.inputs)
    for substrate in spec.substrates:
        attrs.setdefault(substrate.name, {})
        if substrate.type == "Local":
            attrs[substrate.name]["address"] = "127.0.0.1"
        elif substrate.type == "Existing" and substrate.address is not None:
            attrs[substrate.name]["address"] = substrate.address
        declare(substrate.name, "Substrate", substrate.variables)
    for package in spec.packages:
        declare(package.name, "Package", package.variables)
    for service in spec.services:
        declare(service.name, "Service", service.variables)
    for action in actions:
        for task in action.tasks:
            try:
                written = _lookup(spec_data, task.source)
            except (KeyError, IndexError, TypeError):
                continue
            if isinstance(written, Mapping):
                for attribute in sets_of(written):
                    attrs.setdefault(task.target or APPLICATION, {}).setdefault(attribute, None)
    for owner, values in app.properties.items():
        for attribute, value in values.items():
            if not isinstance(attrs.setdefault(owner, {}).get(attribute), macros.Secret):
                attrs[owner][attribute] = value
    entities = [macros.Entity("Application", APPLICATION, attrs.get(APPLICATION, {}))]
    for d in spec.deployments:
        entities.append(macros.Entity("Substrate", d.substrate, attrs.get(d.substrate, {})))
    for d in spec.deployments:
        entities.append(macros.Entity("Deployment", d.name, attrs.get(d.name, {}), parent=d.substrate))
        for p in d.packages:
            entities.append(macros.Entity("Package", p, attrs.get(p, {}), parent=d.name))
        for s in d.services:
            entities.append(macros.Entity("Service", s, attrs.get(s, {}),
                                          parent=d.packages[0] if d.packages else d.name))
    credentials = []
    for c in spec.credentials:
        credentials.append(macros.Credential(c.name, c.username, macros.Secret(f"{c.name}.secret")))
        secrets[f"{c.name}.secret"] = c.secret
    builtins = macros.BuiltinValues(
        blueprint_name=app.blueprint_name, blueprint_uuid=app.blueprint_uid, application_name=app.name,
        application_uuid=app.uid, project_name=app.project,
    )
    return macros.MacroContext(tuple(entities), None, tuple(credentials), builtins), secrets


def secret_name(node: macros.Node) -> str | None:
    """The name a kept reference is looked up by at run time: ``db_cred.secret``, ``Application.x``
    or the namespaced ``Service_DB_x``."""
    if isinstance(node, macros.CredRef):
        return f"{node.credential}.{node.field}"
    if isinstance(node, macros.Ref):
        return f"{node.object}.{node.attribute}" if node.object else node.attribute
    return None


def _secret_names(text: str, secrets: Mapping[str, SecretSource]) -> set[str]:
    """The secrets a rendered-before-the-run text still reads (by their workflow names)."""
    if "@@{" not in text:
        return set()
    found: set[str] = set()
    for macro in macros.parse(text).macros:
        for node in macros.walk(macro.expression):
            name = secret_name(node)
            if name is not None and name in secrets:
                found.add(name)
    return found


def build_workflow(spec_data: Mapping[str, Any], actions: Sequence[CompiledAction], action: CompiledAction,
                   app: AppInfo, place: Layout) -> Built:
    """The workflow of one action of an App; `WorkflowError` names the task and the problem."""
    spec = parse_spec(BlueprintSpec, spec_data)
    context, all_secrets = macro_context(spec, spec_data, actions, app)
    runtime_names: set[tuple[str | None, str]] = set()
    written: dict[str, Mapping[str, Any]] = {}
    for task in action.tasks:
        try:
            found = _lookup(spec_data, task.source)
        except (KeyError, IndexError, TypeError):
            found = {}
        written[task.id] = found if isinstance(found, Mapping) else {}
        for attribute in sets_of(written[task.id]):
            runtime_names.add((task.target or APPLICATION, attribute))
    children: dict[str | None, list[CompiledTask]] = {}
    for task in action.tasks:
        children.setdefault(task.parent, []).append(task)
    preds: dict[str, list[str]] = {}
    for edge in action.edges:
        preds.setdefault(edge.to, []).append(edge.from_)
    by_id = {t.id: t for t in action.tasks}

    def entry(task_id: str | None) -> list[str]:
        """What a task waits for before it may start: its predecessors and its parents'."""
        out: list[str] = []
        while task_id is not None:
            out.extend(preds.get(task_id, []))
            task_id = by_id[task_id].parent
        return out

    needed: set[str] = set()
    on_runner: set[str] = set()
    steps: list[dict[str, Any]] = []
    step_tasks: dict[str, CompiledTask] = {}
    machines: dict[str, Substrate] = {}  # deployment -> its Existing substrate, once a step goes there
    kube_api = False
    for task in action.tasks:
        sid = step_id(task.id)
        if sid in step_tasks:
            raise WorkflowError(f"task {task.id}: its step id {sid} is used twice")
        step_tasks[sid] = task
        depends = [step_id(t) for t in entry(task.id)]
        depends += [step_id(c.id) for c in children.get(task.id, [])]
        ctx = context.at(task.target if task.target and context.entity(task.target) else None)
        deployment, substrate = _placement(spec, task.target)
        step_type = "noop" if task.type == "callRunbook" else task.type
        if substrate is not None and substrate.type == "Existing" and task.type in SSH_TYPES:
            params, texts = _ssh_parameters(task, written[task.id], ctx, runtime_names)
            step_type = SSH_TYPES[task.type]
            machines[deployment] = substrate
        elif task.type == "kubernetes":
            if substrate is None or substrate.manifest is None:
                raise WorkflowError(f"task {task.id} ({task.source}): no Kubernetes substrate with a manifest")
            params, texts = _kubernetes_parameters(task, substrate.manifest, ctx, runtime_names, app.namespace)
            kube_api = True
        else:
            params, texts = _parameters(task, written[task.id], ctx, runtime_names)
            if task.type in ("exec", "setvar"):
                on_runner.add(_substrate_of(spec, task.target) or APPLICATION)
        for text in texts:
            needed |= _secret_names(text, all_secrets)
        step: dict[str, Any] = {
            "id": sid, "name": task.id, "type": step_type,
            "parameters": params, "target": place.targets_of(task.target),
            "dependsOn": sorted(set(depends)), "retries": task.retries,
        }
        if task.timeout_seconds:
            step["timeoutSeconds"] = task.timeout_seconds
        elif task.type == "kubernetes":
            step["timeoutSeconds"] = KUBERNETES_TIMEOUT
        steps.append(step)
    secrets = {n: all_secrets[n] for n in sorted(needed)}
    logins = _logins(spec, machines, context, runtime_names)
    if machines:
        secrets[SSH_PRIVATE_KEY] = _one_key(spec, machines)
    targets: dict[str, dict[str, str]] = {}
    for deployment, names in place.replicas.items():
        for index, name in enumerate(names):
            targets[name] = {INDEX_VARIABLE: str(index), TARGET_VARIABLE: name, "calm_deployment": deployment,
                             **logins.get(deployment, {})}
    replicas = {k: list(v) for k, v in place.replicas.items()}
    layout_json = json.dumps({"prefixes": place.prefixes(), "replicas": replicas}, separators=(",", ":"),
                             sort_keys=True)
    variables = {LAYOUT_VARIABLE: layout_json}
    data = {"name": f"{app.name}/{action.name}", "variables": variables, "targets": targets, "steps": steps}
    known = tuple(sub.known_hosts for sub in machines.values() if sub.known_hosts is not None)
    return Built(data, secrets, step_tasks, tuple(sorted(on_runner)), known, kube_api)


def _placement(spec: BlueprintSpec, entity: str | None) -> tuple[str, Substrate | None]:
    """The deployment an entity lives on and that deployment's substrate ("", None: the runner)."""
    if entity is None:
        return "", None
    for d in spec.deployments:
        if entity in (d.name, d.substrate, *d.packages, *d.services):
            return d.name, next((s for s in spec.substrates if s.name == d.substrate), None)
    return "", None


def _substrate_path(spec: BlueprintSpec, substrate: Substrate) -> str:
    return f"spec.substrates[{spec.substrates.index(substrate)}]"


def _logins(spec: BlueprintSpec, machines: Mapping[str, Substrate], context: macros.MacroContext,
            runtime: set[tuple[str | None, str]]) -> dict[str, dict[str, str]]:
    """deployment -> the ssh inputs of its replicas (address, port, user): plain values, known before the run."""
    out: dict[str, dict[str, str]] = {}
    for deployment, substrate in machines.items():
        path = _substrate_path(spec, substrate)
        address = _render(substrate.address or "", context.at(substrate.name), runtime, f"{path}.address").strip()
        if not address or "@@{" in address:
            raise WorkflowError(f"{path}.address: an Existing substrate's address must be known before the run "
                                "(it may not read a value a task of this action sets)")
        credential = next((c for c in spec.credentials if c.name == substrate.credential), None)
        if credential is None:
            raise WorkflowError(f"{path}.credential: an Existing substrate needs a credential")
        out[deployment] = {"ssh_address": address, "ssh_port": str(substrate.port or 22),
                           "ssh_user": credential.username}
    return out


def _one_key(spec: BlueprintSpec, machines: Mapping[str, Substrate]) -> SecretSource:
    """The private key every Existing substrate of the action logs in with (a run holds one)."""
    found: SecretSource | None = None
    first = ""
    for substrate in machines.values():
        path = _substrate_path(spec, substrate)
        credential = next((c for c in spec.credentials if c.name == substrate.credential), None)
        if credential is None:
            raise WorkflowError(f"{path}.credential: an Existing substrate needs a credential")
        if credential.type != "key":
            raise WorkflowError(f'{path}.credential: credential "{credential.name}" is a {credential.type}; an '
                                "Existing substrate logs in over SSH with a private key only (type key)")
        if substrate.known_hosts is None:
            raise WorkflowError(f"{path}.knownHosts: required for a substrate of type Existing (host keys are "
                                "never accepted on first use)")
        if found is not None and credential.secret != found:
            raise WorkflowError(f'{path}.credential: credential "{credential.name}" holds another key than '
                                f'credential "{first}"; the Existing substrates of one action log in with one key')
        found, first = credential.secret, credential.name
    assert found is not None
    return found


def _ssh_parameters(task: CompiledTask, written: Mapping[str, Any], ctx: macros.MacroContext,
                    runtime: set[tuple[str | None, str]]) -> tuple[dict[str, Any], list[str]]:
    """An exec or setvar task (or a substrate's connect step) on an Existing machine: ssh.exec/ssh.setvar."""
    if task.type == "ssh":
        return {"script": CONNECT_SCRIPT, "shell": "sh"}, []
    where = f"task {task.id} ({task.source})"
    script = _render(str(written.get("script") or ""), ctx, runtime, where)
    params: dict[str, Any] = {"script": script,
                              "shell": SCRIPT_TYPES.get(str(written.get("scriptType") or "shell"), "sh")}
    if task.type == "setvar":
        params["variables"] = sets_of(written)
    return params, [script]


_PLACEHOLDER = "stead-macro-kept-for-run-time"


def _kubernetes_parameters(task: CompiledTask, manifest: str, ctx: macros.MacroContext,
                           runtime: set[tuple[str | None, str]], namespace: str) -> tuple[dict[str, Any], list[str]]:
    """A Kubernetes substrate's apply (create) or remove (delete): the manifest, in the App's namespace."""
    where = f"task {task.id} ({task.source})"
    text = _render(manifest, ctx, runtime, where)
    problem = manifest_problem(text, namespace)
    if problem is not None:
        raise WorkflowError(f"{task.source}: {problem}")
    params = {"action": "delete" if task.name == "remove" else "apply", "manifest": text, "namespace": namespace,
              "namespaceOnly": True}
    return params, [text]


def manifest_problem(text: str, namespace: str) -> str | None:
    """Why a Kubernetes substrate's (rendered) manifest may not be applied in `namespace`: an object
    of a cluster-scoped kind, or of another namespace; None when every object is the App's own.

    An early check, for a clear message before the run: macros kept for run time are read as
    placeholders (a kind or namespace that one decides is refused), and a manifest that is YAML
    only once rendered, or a cluster-scoped kind not in `CLUSTER_SCOPED`, is left to the runner,
    whose `namespaceOnly` check of the rendered objects (API discovery) is the guard."""
    probe = re.sub(r"@@\{.*?\}@@", _PLACEHOLDER, text, flags=re.S)
    try:
        docs = [d for d in yaml.safe_load_all(probe) if d is not None]
    except yaml.YAMLError:
        return None if probe != text else "the manifest is not YAML"
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            return f"document {index} of the manifest is not an object"
        kind = str(doc.get("kind") or "")
        raw_meta = doc.get("metadata")
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
        name = str(meta.get("name") or f"(document {index})")
        what = f"{kind or 'object'} {name}"
        if _PLACEHOLDER in kind or _PLACEHOLDER in str(meta.get("namespace") or ""):
            return f"{what}: its kind and namespace must be known before the run (not read from a macro)"
        if kind in CLUSTER_SCOPED:
            return (f"{what}: {kind} is a cluster-scoped kind; a Kubernetes substrate creates objects in the "
                    f"App's namespace {namespace} only")
        other = meta.get("namespace")
        if other not in (None, "", namespace):
            return (f"{what}: names namespace {other}; a Kubernetes substrate creates objects in the App's "
                    f"namespace {namespace} only")
    return None


def _substrate_of(spec: BlueprintSpec, entity: str | None) -> str:
    for d in spec.deployments:
        if entity in (d.name, d.substrate, *d.packages, *d.services):
            sub = next((s for s in spec.substrates if s.name == d.substrate), None)
            return d.substrate if sub is None or sub.type == "Local" else ""
    return APPLICATION


def _render(text: str, ctx: macros.MacroContext, runtime: set[tuple[str | None, str]], where: str) -> str:
    try:
        return macros.partial_render(text, ctx, frozenset(runtime))
    except macros.MacroError as error:
        raise WorkflowError(f"{where}: {error}") from None


def _parameters(task: CompiledTask, written: Mapping[str, Any], ctx: macros.MacroContext,
                runtime: set[tuple[str | None, str]]) -> tuple[dict[str, Any], list[str]]:
    where = f"task {task.id} ({task.source})"
    if task.type == "callRunbook":
        return {}, []
    if task.type in ("exec", "setvar"):
        script = _render(str(written.get("script") or ""), ctx, runtime, where)
        params: dict[str, Any] = {"script": script,
                                  "interpreter": SCRIPT_TYPES.get(str(written.get("scriptType") or "shell"), "sh")}
        if task.type == "setvar":
            params["variables"] = sets_of(written)
        return params, [script]
    if task.type == "delay":
        return {"seconds": int(written.get("delaySeconds") or 0)}, []
    if task.type == "http":
        http = written.get("http") or {}
        url = _render(str(http.get("url") or ""), ctx, runtime, where)
        headers = {k: _render(str(v), ctx, runtime, where) for k, v in (http.get("headers") or {}).items()}
        params = {"method": http.get("method") or "GET", "url": url, "headers": headers}
        texts = [url, *headers.values()]
        if http.get("body") is not None:
            params["body"] = _render(str(http["body"]), ctx, runtime, where)
            texts.append(params["body"])
        if http.get("expectedStatus"):
            params["expectedStatus"] = list(http["expectedStatus"])
        if http.get("responseVariables"):
            params["responseVariables"] = {v["name"]: v["path"] for v in http["responseVariables"]}
        return params, texts
    raise WorkflowError(f"{where}: tasks of type {task.type} cannot run yet")


# --- after the run -------------------------------------------------------------------------------


def entity_properties(status: Mapping[str, Any], steps: Mapping[str, CompiledTask], place: Layout,
                      ) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Properties the run's successful steps set: replica target -> namespaced name -> value, and
    the application's own (set by tasks that run on no entity)."""
    per_replica: dict[str, dict[str, str]] = {}
    application: dict[str, str] = {}
    for record in status.get("steps") or []:
        values = record.get("variables") or {}
        task = steps.get(str(record.get("step")))
        if not values or task is None or record.get("state") != "success":
            continue
        target = str(record.get("target") or "")
        if not target or task.target is None:
            application.update({str(k): str(v) for k, v in values.items()})
            continue
        kind = place.kind_of.get(task.target, task.target_kind or "Service")
        for name, value in values.items():
            per_replica.setdefault(target, {})[macros.namespaced_name(kind, task.target, str(name))] = str(value)  # type: ignore[arg-type]
    return per_replica, application


def properties_by_entity(replica_props: Mapping[str, Mapping[str, str]], application: Mapping[str, str],
                         place: Layout) -> dict[str, dict[str, str]]:
    """entity -> attribute -> value, the replicas' values joined with "," (what macros read)."""
    out: dict[str, dict[str, str]] = {APPLICATION: dict(application)} if application else {}
    for entity, kind in place.kind_of.items():
        prefix = macros.namespace(kind, entity)  # type: ignore[arg-type]
        deployment = place.deployment_of.get(entity)
        values: dict[str, list[str]] = {}
        for replica in place.replicas.get(deployment or "", ()):
            for name, value in (replica_props.get(replica) or {}).items():
                if name.startswith(prefix):
                    values.setdefault(name[len(prefix):], []).append(value)
        if values:
            out[entity] = {k: ",".join(v) for k, v in values.items()}
    return out


OUTPUT_TAIL = 1024


def run_log(status: Mapping[str, Any], workflow_steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The run log tree: each task (in the workflow's order) with its instances per replica."""
    records: dict[str, list[Mapping[str, Any]]] = {}
    for record in status.get("steps") or []:
        records.setdefault(str(record.get("step")), []).append(record)
    tree: list[dict[str, Any]] = []
    for step in workflow_steps:
        instances = sorted(records.get(step["id"], []), key=lambda r: str(r.get("target") or ""))
        replicas = []
        for r in instances:
            item = {"target": r.get("target") or "", "state": r.get("state", "pending"),
                    "attempts": int(r.get("attempts") or 0)}
            for src, dst in (("startedAt", "startedAt"), ("finishedAt", "finishedAt"), ("exitCode", "exitCode"),
                             ("message", "message")):
                if r.get(src) not in (None, ""):
                    item[dst] = r[src]
            output = str(r.get("output") or "")
            if output:
                item["output"] = output[-OUTPUT_TAIL:]
            replicas.append(item)
        states = {i["state"] for i in replicas}
        state = next((s for s in ("failure", "running", "aborted", "pending", "skipped") if s in states), "success")
        tree.append({"task": step.get("name") or step["id"], "step": step["id"], "type": step["type"],
                     "state": state if replicas else "pending", "replicas": replicas})
    return tree


def first_failure(tree: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(task on replica, reason) of the first failed instance."""
    for task in tree:
        for inst in task.get("replicas") or []:
            if inst.get("state") == "failure":
                where = f"{task['task']}@{inst['target']}" if inst.get("target") else str(task["task"])
                return where, str(inst.get("message") or "failed")
    return None
