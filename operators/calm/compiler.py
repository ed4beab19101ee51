"""The Blueprint compiler (seed 000): from a spec to the system actions, the dependency list and
the decision per macro, or to errors that name what they are about.

Pure: no Kubernetes, no Kopf, no I/O. `compile_blueprint(spec, previous)` is all there is; the
caller (the Blueprint pipeline) writes `CompileResult.status(active)` and emits a Warning Event
with `CompileResult.rebuilt_message` when user-edited actions were thrown away.

How a compile goes, and why:

1. `validation.problems`: the apply-time checks again, for objects that bypassed the webhook.
2. Every runbook becomes a `RunbookDef` (a fragment): a service's action, a package's install
   (create) and uninstall (delete), a substrate's generated create (preCreate, apply or connect,
   readiness, postCreate) and delete (remove, postDelete), each named runbook.
3. Each action is *expanded* into the tree of task instances it runs: an app-level system action
   has one callRunbook task per entity that has a part in it (named after the entity), each
   calls that entity's fragment, which may call further runbooks. A task's id is its path of
   names (`S1/install/configure`), so an instance knows its ancestors, which is what lifting
   implicit dependencies to the enclosing callRunbook tasks needs.
4. Macros are resolved with `operators.calm.macros` in a `MacroContext` built from the spec,
   where every attribute that some setvar or http task sets exists (its value comes at run time).
   In an action, a reference to an attribute that a task of the same action sets is kept for run
   time and makes the reader depend on the setter; any other is resolved before the run (the
   seed's decision). Secrets and moment built-ins (calm_time...) are always kept for run time.
5. A dependency between a getter T1 and a setter T2 becomes an orchestration edge T2 -> T1 in
   the runbook where their paths part (their own runbook when they share one, else between the
   callRunbook tasks that enclose them). Those between entities in create are *promoted*: they
   join `dependsOn` and hold for every system action.
6. The entity dependency graph (networkx) holds inherent (substrate <- packages <- services of a
   deployment), explicit (`dependsOn`) and promoted dependencies. A cycle is an error naming it.
   For each system action the graph is restricted to the entities that have a part in it (paths
   through the others are kept) and oriented: dependencies first for create, start and restart,
   dependents first for stop and delete.
7. The seed's rules for user edits (an app-level action named like a system action in
   spec.actions) use `previous` (`CompiledState`): see `_Edits`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import networkx as nx

from operators.calm import macros
from operators.calm.models import (
    SYSTEM_ACTIONS,
    Action,
    BlueprintSpec,
    BlueprintState,
    BlueprintStatus,
    CompiledAction,
    CompiledEdge,
    CompiledState,
    CompiledTask,
    DependencyEntry,
    EditRecord,
    Runbook,
    Substrate,
    Task,
    Variable,
)
from operators.calm.validation import Index, build_index, callable_actions, problems, substrate_texts, task_texts

APPLICATION: Final = "Application"
"""The name of the Application entity in the macro context (no blueprint entity may take it)."""
REVERSED: Final = frozenset({"stop", "delete"})
"""System actions that run dependents before what they depend on."""
MOMENT_BUILTINS: Final = frozenset({"calm_time", "calm_date", "calm_random", "calm_is_within"})
"""Built-ins whose value depends on when the task runs: the macros module keeps them for run time."""
STATUS_LIMIT: Final = 1_000_000
"""Largest status, in bytes of JSON, that `CompileResult.status` writes whole: etcd refuses objects
over 1.5 MiB by default, and the spec shares that budget. Larger compiled actions are summarized."""
MAX_TASKS_PER_ACTION: Final = 100_000
"""An action expanding to more task instances than this is refused: shared runbooks called from
many places multiply, and a status (or a workflow) of that size is a mistake, not a blueprint."""

EdgeReason = Literal["inherent", "explicit", "implicit", "spec", "user"]


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MacroDecision:
    """The seed's decision for one macro of one task instance of one action."""

    action: str  # "create", or "Service/S1/backup" for a service's own action
    task: str  # the task's id in the action
    field: str  # the spec field holding the text
    macro: str  # the macro's source, "@@{DB.url}@@"
    position: int  # its offset in the field's text
    runtime: bool  # kept for run time (True) or resolved before the run (False)
    reason: str  # why, for a human
    reads: tuple[str, ...] = ()  # what it reads: "Service DB.url", "credential db.secret"


@dataclass(frozen=True, slots=True)
class CompileResult:
    """Everything a compile found. `errors` empty means the blueprint compiled."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    actions: tuple[CompiledAction, ...] = ()
    dependency_list: tuple[DependencyEntry, ...] = ()
    macros: tuple[MacroDecision, ...] = ()
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)  # entity X -> Y: X depends on Y
    state: CompiledState | None = None
    rebuilt: bool = False
    rebuilt_message: str | None = None
    service_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    def state_name(self, active: bool | None) -> BlueprintState:
        return blueprint_state(self.ok, active)

    def status(self, active: bool | None, limit: int = STATUS_LIMIT) -> dict[str, Any]:
        """The Blueprint's status fields (camelCase), to merge into its status: every field is
        present (lists replace those of the previous compile, null removes what no longer holds);
        empty optional fields inside list items are left out."""
        status = BlueprintStatus(
            state=self.state_name(active),
            errors=list(self.errors),
            warnings=list(self.warnings),
            dependency_list=list(self.dependency_list),
            actions=list(self.actions),
            service_count=self.service_count,
            action_count=len(self.actions),
            task_count=sum(len(a.tasks) for a in self.actions),
            compiled_state=self.state,
        )
        own = {"phase", "observed_generation", "conditions"}
        data = status.model_dump(by_alias=True, mode="json", exclude=own, exclude_none=True)
        if len(json.dumps(data, separators=(",", ":"))) > limit:
            for compiled_action in data["actions"]:
                compiled_action["tasks"], compiled_action["edges"] = [], []
            data["actionsTruncated"] = True
            data["warnings"].append(f"the compiled actions are larger than {limit} bytes: status.actions lists "
                                    "them without their tasks and edges")
        for name, info in BlueprintStatus.model_fields.items():
            if name not in own:
                data.setdefault(info.alias or name, None)  # null removes a stale field in a merge patch
        return data


def blueprint_state(compiled: bool, active: bool | None) -> BlueprintState:
    """Error when the compile failed; else Active or Inactive as `spec.active` says, Compiled if unset."""
    if not compiled:
        return "Error"
    if active is None:
        return "Compiled"
    return "Active" if active else "Inactive"


# --- internal structures -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskDef:
    """A task as written (or generated), before it is placed in an action."""

    name: str
    type: str
    source: str
    target: str | None = None
    texts: tuple[tuple[str, str], ...] = ()  # (spec field, text) that may hold macros
    sets: tuple[str, ...] = ()
    retries: int = 0
    timeout: int | None = None
    runbook: str | None = None  # callRunbook: a named runbook
    action: str | None = None  # callRunbook: an action of the target
    callee: str | None = None  # a generated call: the fragment's key


@dataclass(frozen=True, slots=True)
class EdgeDef:
    """An edge of a runbook, between task names."""

    src: str
    dst: str
    reason: EdgeReason
    source: str
    why: str


@dataclass(frozen=True, slots=True)
class RunbookDef:
    """A runbook (fragment) as the compiler knows it, under a key like "Service/S1/create"."""

    key: str
    source: str
    tasks: tuple[TaskDef, ...]
    edges: tuple[EdgeDef, ...] = ()


@dataclass(slots=True)
class Inst:
    """One task instance of an expanded action."""

    id: str
    parent: str | None
    task: TaskDef
    target: str | None
    calls: str | None = None
    runtime_macros: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Link:
    """An edge between two task instances of the same parent."""

    src: str
    dst: str
    reason: EdgeReason
    source: str
    why: str


@dataclass(slots=True)
class Expansion:
    """An action expanded into task instances (parents before children) and links."""

    label: str
    insts: list[Inst] = field(default_factory=list)
    by_id: dict[str, Inst] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, inst: Inst) -> None:
        self.insts.append(inst)
        self.by_id[inst.id] = inst


@dataclass(frozen=True, slots=True)
class Dep:
    """An implicit dependency found in an action: `getter` reads what `setter` sets."""

    getter: Inst
    setter: Inst
    owner_kind: str
    owner: str
    attribute: str
    field: str
    macro: str


@dataclass(slots=True)
class Analysis:
    deps: list[Dep] = field(default_factory=list)
    decisions: list[MacroDecision] = field(default_factory=list)


def lift(getter: str, setter: str) -> tuple[str | None, str, str] | None:
    """Where the orchestration edge of a dependency goes: (parent, from, to) in the runbook where
    the two paths part, i.e. between the tasks themselves when they share a runbook, else between
    the first callRunbook tasks that enclose them there. None when one encloses the other."""
    g, s = getter.split("/"), setter.split("/")
    i = 0
    while i < len(g) and i < len(s) and g[i] == s[i]:
        i += 1
    if i == len(g) or i == len(s):
        return None
    parent = "/".join(g[:i]) or None
    return parent, "/".join(s[: i + 1]), "/".join(g[: i + 1])


def _join(prefix: str | None, name: str) -> str:
    return name if prefix is None else f"{prefix}/{name}"


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _taskdef(task: Task, source: str) -> TaskDef:
    sets = tuple(task.variables)
    if task.http is not None:
        sets += tuple(v.name for v in task.http.response_variables)
    return TaskDef(
        name=task.name,
        type=task.type,
        source=source,
        target=task.target,
        texts=tuple((source + suffix, text) for suffix, text in task_texts(task)),
        sets=sets,
        retries=task.retries,
        timeout=task.timeout_seconds,
        runbook=task.runbook,
        action=task.action,
    )


def _runbookdef(key: str, runbook: Runbook, source: str) -> RunbookDef:
    tasks = tuple(_taskdef(t, f"{source}.tasks[{j}]") for j, t in enumerate(runbook.tasks))
    edges = tuple(
        EdgeDef(e.from_, e.to, "spec", f"{source}.edges[{k}]", f"edge {e.from_} -> {e.to}")
        for k, e in enumerate(runbook.edges)
    )
    return RunbookDef(key, source, tasks, edges)


def _chain(tasks: Sequence[TaskDef], source: str, why: str) -> tuple[EdgeDef, ...]:
    return tuple(EdgeDef(a.name, b.name, "inherent", source, why) for a, b in itertools.pairwise(tasks))


# --- the compiler --------------------------------------------------------------------------------


def compile_blueprint(spec: BlueprintSpec, previous: CompiledState | None = None) -> CompileResult:
    """Compile a blueprint. `previous` is `status.compiledState` of the last successful compile
    (None the first time): it carries the dependency list digest and the user edits, for the
    seed's rule that user-edited actions stay until the dependency list changes."""
    parsed: dict[str, macros.Template] = {}
    found = problems(spec, parsed)
    if found:
        return CompileResult(errors=tuple(found), state=previous, service_count=len(spec.services))
    return _Compiler(spec, previous, parsed).run()


class _Compiler:
    def __init__(self, spec: BlueprintSpec, previous: CompiledState | None,
                 parsed: dict[str, macros.Template]) -> None:
        self.spec = spec
        self.previous = previous
        self.index: Index = build_index(spec)
        self.errors: dict[str, None] = {}
        self.warnings: dict[str, None] = {}
        self.fragments: dict[str, RunbookDef] = {}
        self.parts: dict[str, list[str]] = {a: [] for a in SYSTEM_ACTIONS}  # action -> entities in order
        self.templates = parsed
        self.contexts: dict[str | None, macros.MacroContext] = {}
        self.declared: set[tuple[str, str]] = set()
        self.called_runbooks: set[str] = set()

    # setup

    def entity_order(self) -> list[str]:
        """Substrates, packages and services, deployment by deployment: the order of call tasks."""
        order: list[str] = []
        for deployment in self.spec.deployments:
            order.append(deployment.substrate)
            order.extend(deployment.packages)
            order.extend(deployment.services)
        return order

    def build_fragments(self) -> None:
        spec = self.spec
        for i, substrate in enumerate(spec.substrates):
            self.substrate_fragments(f"spec.substrates[{i}]", substrate)
        for i, package in enumerate(spec.packages):
            path = f"spec.packages[{i}]"
            for action, key, runbook in (("create", "install", package.install),
                                         ("delete", "uninstall", package.uninstall)):
                if runbook is not None and runbook.tasks:
                    self.fragments[f"Package/{package.name}/{action}"] = _runbookdef(
                        f"Package/{package.name}/{action}", runbook, f"{path}.{key}")
        for i, service in enumerate(spec.services):
            for j, service_action in enumerate(service.actions):
                key = f"Service/{service.name}/{service_action.name}"
                self.fragments[key] = _runbookdef(key, service_action, f"spec.services[{i}].actions[{j}]")
        for i, named in enumerate(spec.runbooks):
            key = f"Runbook/{named.name}"
            self.fragments[key] = _runbookdef(key, named, f"spec.runbooks[{i}]")
        for name in self.entity_order():
            kind = self.index.kind_of(name)
            for action in SYSTEM_ACTIONS:
                fragment = self.fragments.get(f"{kind}/{name}/{action}")
                if fragment is not None and fragment.tasks:
                    self.parts[action].append(name)

    def substrate_fragments(self, path: str, substrate: Substrate) -> None:
        """A substrate's create and delete, generated: its fragments and the steps its type needs,
        in order (each step waits for the previous one)."""
        name = substrate.name
        texts = dict(substrate_texts(substrate))
        steps: list[TaskDef] = []
        for key, runbook in (("preCreate", substrate.pre_create), ("postCreate", substrate.post_create),
                             ("postDelete", substrate.post_delete)):
            if runbook is not None and runbook.tasks:
                self.fragments[f"Substrate/{name}/{key}"] = _runbookdef(
                    f"Substrate/{name}/{key}", runbook, f"{path}.{key}")

        def call(key: str) -> TaskDef | None:
            fragment_key = f"Substrate/{name}/{key}"
            if fragment_key not in self.fragments:
                return None
            return TaskDef(key, "callRunbook", f"{path}.{key}", target=name, callee=fragment_key)

        pre = call("preCreate")
        if pre is not None:
            steps.append(pre)
        if substrate.type == "Kubernetes":
            steps.append(TaskDef("apply", "kubernetes", f"{path}.manifest", target=name,
                                 texts=((f"{path}.manifest", texts[".manifest"]),)))
        elif substrate.type == "Existing":
            steps.append(TaskDef("connect", "ssh", f"{path}.address", target=name,
                                 texts=((f"{path}.address", texts[".address"]),)))
        if substrate.readiness is not None:
            check = substrate.readiness
            steps.append(TaskDef(
                "readiness", check.type, f"{path}.readiness", target=name,
                texts=tuple((path + k, v) for k, v in texts.items() if k.startswith(".readiness")),
                retries=check.retries, timeout=check.timeout_seconds,
            ))
        post = call("postCreate")
        if post is not None:
            steps.append(post)
        if steps:
            self.fragments[f"Substrate/{name}/create"] = RunbookDef(
                f"Substrate/{name}/create", path, tuple(steps), _chain(steps, path, "a substrate's steps run in order"))
        steps = []
        if substrate.type == "Kubernetes":
            steps.append(TaskDef("remove", "kubernetes", f"{path}.manifest", target=name,
                                 texts=((f"{path}.manifest", texts[".manifest"]),)))
        post_delete = call("postDelete")
        if post_delete is not None:
            steps.append(post_delete)
        if steps:
            self.fragments[f"Substrate/{name}/delete"] = RunbookDef(
                f"Substrate/{name}/delete", path, tuple(steps), _chain(steps, path, "a substrate's steps run in order"))

    # expansion

    def expand(self, label: str, root: RunbookDef, default_target: str | None) -> Expansion:
        expansion = Expansion(label)
        self._expand_into(expansion, root, None, default_target, (root.key,))
        return expansion

    def _expand_into(self, exp: Expansion, runbook: RunbookDef, prefix: str | None, default_target: str | None,
                     stack: tuple[str, ...]) -> None:
        for task in runbook.tasks:
            target = task.target if task.target is not None else default_target
            inst = Inst(_join(prefix, task.name), prefix, task, target)
            exp.add(inst)
            if len(exp.insts) > MAX_TASKS_PER_ACTION:
                exp.errors.append(f"{task.source}: action {exp.label} expands to more than {MAX_TASKS_PER_ACTION} "
                                  "tasks (runbooks called from many places multiply)")
                return
            if task.type != "callRunbook":
                continue
            callee = self.callee(task, target)
            if isinstance(callee, str):
                exp.errors.append(f"{task.source}: {callee}")
                continue
            key, callee_target = callee
            inst.calls = key
            if key.startswith("Runbook/"):
                self.called_runbooks.add(key)
            if key in stack:
                cycle = " -> ".join((*stack[stack.index(key):], key))
                exp.errors.append(f"{task.source}: callRunbook cycle: {cycle}")
                continue
            child = self.fragments.get(key)
            if child is not None:
                self._expand_into(exp, child, inst.id, callee_target, (*stack, key))
        for edge in runbook.edges:
            exp.links.append(Link(_join(prefix, edge.src), _join(prefix, edge.dst), edge.reason, edge.source, edge.why))

    def callee(self, task: TaskDef, target: str | None) -> tuple[str, str | None] | str:
        """The fragment a callRunbook task runs and the default target inside it, or a problem."""
        if task.callee is not None:
            return task.callee, target
        if task.runbook is not None:
            return f"Runbook/{task.runbook}", target
        if task.action is None:
            return "a callRunbook task names a runbook or an action"
        if target is None:
            return f'calling action "{task.action}" needs a target (none given here, none inherited from the caller)'
        actions = callable_actions(self.spec, self.index, target)
        kind = self.index.kind_of(target)
        if actions is None or kind is None:
            return f'no entity "{target}" to run action "{task.action}" on'
        if task.action not in actions:
            return f'{kind.lower()} "{target}" has no action "{task.action}"'
        return f"{kind}/{target}/{task.action}", target

    def system_root(self, action: str) -> RunbookDef:
        tasks = []
        for name in self.parts[action]:
            key = f"{self.index.kind_of(name)}/{name}/{action}"
            tasks.append(TaskDef(name, "callRunbook", self.fragments[key].source, target=name, callee=key))
        return RunbookDef(f"Application/{action}", "spec", tuple(tasks))

    # macros

    def build_context(self, expansions: Iterable[Expansion]) -> None:
        """The macro context of the blueprint: every entity with its declared variables, the
        attributes its type gives (a Local or Existing substrate's address) and every attribute a
        task sets anywhere (value None: known at run time)."""
        spec = self.spec
        attrs: dict[str, dict[str, macros.AttributeValue]] = defaultdict(dict)

        def declare(owner: str, variables: Sequence[Variable]) -> None:
            for var in variables:
                value: macros.AttributeValue = var.value
                if var.type == "secret":
                    value = macros.Secret(f"variable/{owner}/{var.name}")
                attrs[owner][var.name] = value
                self.declared.add((owner, var.name))

        declare(APPLICATION, spec.variables)
        for substrate in spec.substrates:
            if substrate.type == "Local":
                attrs[substrate.name]["address"] = "127.0.0.1"
            elif substrate.type == "Existing" and substrate.address is not None:
                attrs[substrate.name]["address"] = substrate.address
            declare(substrate.name, substrate.variables)
        for package in spec.packages:
            declare(package.name, package.variables)
        for service in spec.services:
            declare(service.name, service.variables)
        for expansion in expansions:
            for inst in expansion.insts:
                for attribute in inst.task.sets:
                    attrs[inst.target or APPLICATION].setdefault(attribute, None)
        # The chain Application -> Substrate -> Deployment -> Package -> Service: a service hangs
        # under its deployment's first package (a context has one parent per entity).
        entities = [macros.Entity("Application", APPLICATION, attrs[APPLICATION])]
        for d in spec.deployments:
            entities.append(macros.Entity("Substrate", d.substrate, attrs[d.substrate]))
        for d in spec.deployments:
            entities.append(macros.Entity("Deployment", d.name, attrs[d.name], parent=d.substrate))
            for p in d.packages:
                entities.append(macros.Entity("Package", p, attrs[p], parent=d.name))
            for s in d.services:
                entities.append(macros.Entity("Service", s, attrs[s], parent=d.packages[0] if d.packages else d.name))
        credentials = [macros.Credential(c.name, c.username, macros.Secret(f"credential/{c.name}"))
                       for c in spec.credentials]
        base = macros.MacroContext(tuple(entities), None, tuple(credentials))
        self.contexts = {None: base}

    def context_at(self, target: str | None) -> macros.MacroContext:
        """The context of a task running on `target`. `MacroContext.at` validates the whole context
        again (linear in its size), once per task would make the compile quadratic: the context is
        copied with only `current` changed, which is what `at` means."""
        context = self.contexts.get(target)
        if context is None:
            base = self.contexts[None]
            if target is not None and base.entity(target) is None:
                raise ValueError(f"no entity {target!r}")  # targets were validated: an internal error
            context = copy.copy(base)
            object.__setattr__(context, "current", target)
            self.contexts[target] = context
        return context

    def template(self, text: str) -> macros.Template | None:
        template = self.templates.get(text)
        if template is None:
            try:
                template = macros.parse(text)
            except macros.MacroError:
                return None  # reported by validation
            self.templates[text] = template
        return template

    def analyse(self, exp: Expansion) -> Analysis:
        """The seed's decision for every macro of the action, and its implicit dependencies."""
        setters: dict[tuple[str | None, str], list[Inst]] = defaultdict(list)
        for inst in exp.insts:
            for attribute in inst.task.sets:
                setters[(inst.target or APPLICATION, attribute)].append(inst)
        runtime_names = frozenset(setters)
        out = Analysis()
        for inst in exp.insts:
            if not inst.task.texts:
                continue
            context = self.context_at(inst.target)
            for place, text in inst.task.texts:
                if "@@{" not in text:
                    continue
                template = self.template(text)
                if template is None:
                    continue
                problems_found = macros.check(template, context, runtime_names)
                for problem in problems_found:
                    macro = f"{problem.macro} " if problem.macro else ""
                    self.errors[f'{place}: task "{inst.task.name}": macro {macro}at position {problem.position}: '
                                f"{problem.message}"] = None
                if problems_found:
                    continue
                for m in template.macros:
                    out.decisions.append(self.decide(exp, inst, place, m, context, runtime_names, setters, out))
        return out

    def decide(self, exp: Expansion, inst: Inst, place: str, m: macros.Macro, context: macros.MacroContext,
               runtime_names: frozenset[tuple[str | None, str]],
               setters: Mapping[tuple[str | None, str], list[Inst]], out: Analysis) -> MacroDecision:
        reasons: list[str] = []
        reads: list[str] = []
        for node in macros.walk(m.expression):
            if isinstance(node, macros.Call) and node.name in MOMENT_BUILTINS:
                reasons.append(f"{node.name} depends on when the task runs")
            if not isinstance(node, macros.Ref | macros.CredRef):
                continue
            try:
                resolution = macros.resolve(node, context, runtime_names)
            except macros.MacroError:
                continue  # `check` reported it already
            if resolution.credential is not None:
                reads.append(f"credential {resolution.credential.name}.{resolution.attribute}")
                if resolution.attribute == "secret":
                    reasons.append("a secret is fetched only when the task runs")
                continue
            if resolution.entity is None:
                continue
            entity = resolution.entity
            reads.append(f"{entity.kind} {entity.name}.{resolution.attribute}")
            if isinstance(entity.attributes.get(resolution.attribute), macros.Secret):
                reasons.append("a secret is fetched only when the task runs")
            if resolution.runtime:
                by = [s for s in setters.get((entity.name, resolution.attribute), ()) if s is not inst]
                if not by:
                    reasons.append("the task sets it itself")
                for setter in by:
                    reasons.append(f"task {setter.id} of this action sets {entity.name}.{resolution.attribute}")
                    out.deps.append(Dep(inst, setter, entity.kind, entity.name, resolution.attribute, place, m.source))
            elif (exp.label == "create" and entity.attributes.get(resolution.attribute) is None
                  and (entity.name, resolution.attribute) not in self.declared):
                self.warnings[f'{place}: task "{inst.task.name}": macro {m.source} reads '
                              f"{entity.name}.{resolution.attribute}, which only tasks of other actions set: "
                              "it has no value while create runs"] = None
        runtime = bool(reasons)
        if runtime:
            inst.runtime_macros.append(m.source)
        return MacroDecision(
            action=exp.label, task=inst.id, field=place, macro=m.source, position=m.position, runtime=runtime,
            reason="; ".join(dict.fromkeys(reasons)) if runtime else "known before the run",
            reads=tuple(dict.fromkeys(reads)),
        )

    # the entity graph

    def entity_graph(self, promoted: Sequence[tuple[Dep, str, str]]) -> nx.DiGraph:
        """X -> Y when X depends on Y: inherent, explicit and promoted implicit dependencies.
        Deployments are nodes that depend on their members, so that depending on a deployment
        means depending on all of it."""
        graph = nx.DiGraph()
        for name in self.entity_order():
            graph.add_node(name)
        for d in self.spec.deployments:
            graph.add_node(d.name)

        def add(x: str, y: str, reason: EdgeReason, source: str, why: str) -> None:
            if not graph.has_edge(x, y):
                graph.add_edge(x, y, reason=reason, source=source, why=why)

        for i, d in enumerate(self.spec.deployments):
            path = f"spec.deployments[{i}]"
            for p in d.packages:
                add(p, d.substrate, "inherent", path, f"package {p} is installed on substrate {d.substrate}")
            for s in d.services:
                for p in d.packages or [d.substrate]:
                    add(s, p, "inherent", path, f"service {s} runs on {p} of deployment {d.name}")
            for member in (d.substrate, *d.packages, *d.services):
                add(d.name, member, "inherent", path, f"deployment {d.name} includes {member}")
            for j, other in enumerate(d.depends_on):
                add(d.substrate, other, "explicit", f"{path}.dependsOn[{j}]", f"deployment {d.name} dependsOn {other}")
        for i, service in enumerate(self.spec.services):
            for j, other in enumerate(service.depends_on):
                add(service.name, other, "explicit", f"spec.services[{i}].dependsOn[{j}]",
                    f"{service.name} dependsOn {other}")
        for dep, setter_top, getter_top in promoted:
            add(getter_top, setter_top, "implicit", dep.field,
                f"{getter_top} reads {dep.macro} that {setter_top} sets in create")
        return graph

    def cycles(self, graph: nx.DiGraph, order: Mapping[str, int], what: str) -> list[str]:
        """One error per cycle (per strongly connected component), starting at its first node in
        spec order, with the reason of each edge: `S1 -> S2 -> S1 (S1 dependsOn S2; ...)`."""
        found: list[tuple[int, str]] = []
        for component in nx.strongly_connected_components(graph):
            if len(component) == 1:
                (only,) = component
                if not graph.has_edge(only, only):
                    continue
            edges = nx.find_cycle(graph.subgraph(component))
            nodes = [u for u, _ in edges]
            start = min(range(len(nodes)), key=lambda k: order.get(nodes[k], len(order)))
            nodes = nodes[start:] + nodes[:start]
            ring = [*nodes, nodes[0]]
            data = [graph.edges[a, b] for a, b in itertools.pairwise(ring)]
            text = f"{data[0]['source']}: {what}: {' -> '.join(ring)} ({'; '.join(d['why'] for d in data)})"
            found.append((order.get(nodes[0], len(order)), text))
        return [text for _, text in sorted(found)]

    # the run

    def run(self) -> CompileResult:
        spec = self.spec
        self.build_fragments()
        generated = {a: self.expand(a, self.system_root(a), None) for a in SYSTEM_ACTIONS}
        edits = {a.name: (i, a) for i, a in enumerate(spec.actions) if a.name in SYSTEM_ACTIONS}
        edited = {name: self.expand(name, self.edited_root(name, i, a), None) for name, (i, a) in edits.items()}
        users = self.user_expansions()
        self.build_context([*generated.values(), *edited.values(), *(e for _, _, e in users)])

        analyses = {a: self.analyse(generated[a]) for a in SYSTEM_ACTIONS}
        tops: dict[str, list[tuple[Dep, str, str]]] = {}
        inner: dict[str, list[Link]] = {}
        for action, analysis in analyses.items():
            tops[action], inner[action] = self.implicit_links(action, analysis.deps)
        graph = self.entity_graph(tops["create"])
        order = {name: k for k, name in enumerate([*self.entity_order(), *(d.name for d in spec.deployments)])}
        for cycle in self.cycles(graph, order, "dependency cycle"):
            self.errors[cycle] = None
        for expansion in generated.values():
            self.errors.update(dict.fromkeys(expansion.errors))
        if self.errors:
            return self.failed()

        dependency_list = self.dependency_list(tops)
        digest = _digest(sorted(_digest(e.model_dump(by_alias=True, exclude={"source"})) for e in dependency_list))
        decide = _Edits(self.previous, digest, {n: (i, _digest(a.model_dump(by_alias=True, mode="json")))
                                                 for n, (i, a) in edits.items()})

        actions: list[CompiledAction] = []
        decisions: list[MacroDecision] = [d for a in analyses.values() for d in a.decisions]
        edited_create: Expansion | None = None
        if "create" in decide.accepted:
            edited_create = edited["create"]
        for action in SYSTEM_ACTIONS:
            if action in decide.accepted:
                exp = edited[action]
                self.errors.update(dict.fromkeys(exp.errors))
                analysis = self.analyse(exp)
                decisions = [d for d in decisions if d.action != action] + analysis.decisions
                top, inner_links = self.implicit_links(action, analysis.deps)
                exp.links.extend(inner_links)
                self.check_user_links(exp)
                self.warn_unordered(exp, top, "user-edited")
                actions.append(self.compiled(exp, "Application", None, system=True, user_edited=True))
            elif edited_create is not None:
                exp = generated[action]
                exp.links.extend(inner[action])
                exp.links.extend(self.derived_links(action, edited_create))
                self.warn_unordered(exp, tops[action], "rebuilt from the user-edited create")
                actions.append(self.compiled(exp, "Application", None, system=True, user_edited=True))
            else:
                exp = generated[action]
                exp.links.extend(inner[action])
                exp.links.extend(self.structural_links(action, graph))
                for dep, setter_top, getter_top in tops[action]:
                    exp.links.append(Link(setter_top, getter_top, "implicit", dep.field,
                                          f"{getter_top} reads {dep.macro} that {setter_top} sets in {action}"))
                actions.append(self.compiled(exp, "Application", None, system=True, user_edited=False))
        for level, owner, exp in users:
            self.errors.update(dict.fromkeys(exp.errors))
            decisions.extend(self.analyse(exp).decisions)
            actions.append(self.compiled(exp, level, owner, system=False, user_edited=False))
        for i, named in enumerate(spec.runbooks):
            if f"Runbook/{named.name}" not in self.called_runbooks:
                self.warnings[f'spec.runbooks[{i}]: runbook "{named.name}" is never called'] = None
        self.warnings.update(dict.fromkeys(decide.warnings))
        if self.errors:
            return self.failed()
        return CompileResult(
            errors=(),
            warnings=tuple(self.warnings),
            actions=tuple(actions),
            dependency_list=tuple(dependency_list),
            macros=tuple(decisions),
            graph=graph,
            state=CompiledState(dependency_digest=digest, edits=decide.records),
            rebuilt=bool(decide.discarded_now),
            rebuilt_message=decide.message(),
            service_count=len(spec.services),
        )

    def failed(self) -> CompileResult:
        return CompileResult(errors=tuple(self.errors), warnings=tuple(self.warnings), state=self.previous,
                             service_count=len(self.spec.services))

    def user_expansions(self) -> list[tuple[Literal["Application", "Service"], str | None, Expansion]]:
        out: list[tuple[Literal["Application", "Service"], str | None, Expansion]] = []
        for i, action in enumerate(self.spec.actions):
            if action.name not in SYSTEM_ACTIONS:
                root = _runbookdef(f"Application/{action.name}", action, f"spec.actions[{i}]")
                out.append(("Application", None, self.expand(action.name, root, None)))
        for service in self.spec.services:
            for action in service.actions:
                if action.name not in SYSTEM_ACTIONS:
                    key = f"Service/{service.name}/{action.name}"
                    out.append(("Service", service.name, self.expand(key, self.fragments[key], service.name)))
        return out

    def edited_root(self, action: str, i: int, edit: Action) -> RunbookDef:
        """A user edit of a generated action: the generated callRunbook tasks (one per entity with a
        part in it) plus the user's tasks (one with an entity's name replaces its call), and the
        user's edges, which replace the generated ones."""
        source = f"spec.actions[{i}]"
        own = [_taskdef(t, f"{source}.tasks[{j}]") for j, t in enumerate(edit.tasks)]
        names = {t.name for t in own}
        tasks = [t for t in self.system_root(action).tasks if t.name not in names] + own
        edges = tuple(EdgeDef(e.from_, e.to, "user", f"{source}.edges[{k}]", f"edge {e.from_} -> {e.to} of the edit")
                      for k, e in enumerate(edit.edges))
        return RunbookDef(f"Application/{action}", source, tuple(tasks), edges)

    def check_user_links(self, exp: Expansion) -> None:
        for link in exp.links:
            if link.reason != "user":
                continue
            for end, key in ((link.src, "from"), (link.dst, "to")):
                if end not in exp.by_id:
                    tops = ", ".join(inst.id for inst in exp.insts if inst.parent is None) or "none"
                    self.errors[f'{link.source}.{key}: "{end}" has no part in action {exp.label} '
                                f"(its tasks: {tops})"] = None

    def implicit_links(self, action: str, deps: Sequence[Dep]) -> tuple[list[tuple[Dep, str, str]], list[Link]]:
        """Lift each dependency to its orchestration edge: top-level ones (between the entities'
        call tasks) are returned apart, as (dep, setter's top task, getter's top task)."""
        tops: list[tuple[Dep, str, str]] = []
        links: dict[tuple[str, str], Link] = {}
        for dep in deps:
            lifted = lift(dep.getter.id, dep.setter.id)
            if lifted is None:
                continue
            parent, src, dst = lifted
            if parent is None:
                tops.append((dep, src, dst))
            elif (src, dst) not in links:
                links[(src, dst)] = Link(src, dst, "implicit", dep.field,
                                         f"{dep.getter.id} reads {dep.macro} that {dep.setter.id} sets in {action}")
        return tops, list(links.values())

    def structural_links(self, action: str, graph: nx.DiGraph) -> list[Link]:
        """The generated top-level edges of a system action: the entity graph restricted to the
        entities with a part in it (keeping paths through the others), oriented for the action."""
        kept = set(self.parts[action])
        links: list[Link] = []
        for x, reaches in _contract(graph, kept).items():
            for y, data in reaches.items():
                src, dst = (x, y) if action in REVERSED else (y, x)
                links.append(Link(src, dst, data["reason"], data["source"], data["why"]))
        return links

    def derived_links(self, action: str, create: Expansion) -> list[Link]:
        """The seed: when create is edited, the other system actions are rebuilt from its edges
        (between entities; reversed for stop and delete) and marked user-edited."""
        graph = nx.DiGraph()
        for link in create.links:  # the user's own tasks stay in as steps between entities
            if link.reason == "user":
                graph.add_edge(link.src, link.dst, reason="user", source=link.source,
                               why=f"{link.src} before {link.dst} in the user-edited create")
        if not nx.is_directed_acyclic_graph(graph):
            return []  # the edited create's own cycle is reported on it
        kept = set(self.parts[action])
        links = []
        for x, reaches in _contract(graph, kept).items():
            for y, data in reaches.items():
                src, dst = (y, x) if action in REVERSED else (x, y)
                links.append(Link(src, dst, "user", data["source"], data["why"]))
        return links

    def warn_unordered(self, exp: Expansion, tops: Sequence[tuple[Dep, str, str]], what: str) -> None:
        """A user-edited action keeps the user's edges; say when they leave a reader unordered
        after the task that sets what it reads (the seed accepts such inconsistencies)."""
        if not tops:
            return
        top = {inst.id for inst in exp.insts if inst.parent is None}
        graph = nx.DiGraph((link.src, link.dst) for link in exp.links if link.dst in top)
        after: dict[str, set[str]] = {}  # one walk per setter, however many readers it has
        for dep, setter_top, getter_top in tops:
            if setter_top not in after:
                after[setter_top] = nx.descendants(graph, setter_top) if setter_top in graph else set()
            if setter_top in exp.by_id and getter_top in exp.by_id and getter_top not in after[setter_top]:
                self.warnings[f"{dep.field}: in the {what} action {exp.label}, {getter_top} reads {dep.macro} that "
                              f"{setter_top} sets, but no edge orders {setter_top} first"] = None

    def dependency_list(self, tops: Mapping[str, Sequence[tuple[Dep, str, str]]]) -> list[DependencyEntry]:
        spec = self.spec
        kind = self.index.kind_of
        out: list[DependencyEntry] = []
        for i, d in enumerate(spec.deployments):
            path = f"spec.deployments[{i}]"
            for p in d.packages:
                out.append(DependencyEntry(type="inherent", getter_resource_kind="Package", getter_resource_name=p,
                                           setter_resource_kind="Substrate", setter_resource_name=d.substrate,
                                           source=path))
            for s in d.services:
                for p in d.packages or [d.substrate]:
                    out.append(DependencyEntry(type="inherent", getter_resource_kind="Service", getter_resource_name=s,
                                               setter_resource_kind=kind(p) or "", setter_resource_name=p,
                                               source=path))
        for i, service in enumerate(spec.services):
            for j, other in enumerate(service.depends_on):
                out.append(DependencyEntry(type="explicit", getter_resource_kind="Service",
                                           getter_resource_name=service.name,
                                           setter_resource_kind=kind(other) or "", setter_resource_name=other,
                                           source=f"spec.services[{i}].dependsOn[{j}]"))
        for i, d in enumerate(spec.deployments):
            for j, other in enumerate(d.depends_on):
                out.append(DependencyEntry(type="explicit", getter_resource_kind="Deployment",
                                           getter_resource_name=d.name, setter_resource_kind=kind(other) or "",
                                           setter_resource_name=other, source=f"spec.deployments[{i}].dependsOn[{j}]"))
        seen: set[tuple[str, ...]] = set()
        for action in SYSTEM_ACTIONS:
            for dep, setter_top, getter_top in tops[action]:
                key = (action, getter_top, setter_top, dep.attribute, dep.getter.id, dep.setter.id)
                if key in seen:
                    continue
                seen.add(key)
                out.append(DependencyEntry(
                    type="implicit", getter_resource_kind=kind(getter_top) or "", getter_resource_name=getter_top,
                    setter_resource_kind=kind(setter_top) or "", setter_resource_name=setter_top,
                    setter_resource_attr=dep.attribute, action_resource_kind="Application", action_name=action,
                    getter_task=dep.getter.id, setter_task=dep.setter.id, source=dep.field,
                ))
        return out

    def compiled(self, exp: Expansion, level: Literal["Application", "Service"], owner: str | None, *,
                 system: bool, user_edited: bool) -> CompiledAction:
        kind = self.index.kind_of
        tasks = [
            CompiledTask(
                id=i.id, name=i.task.name, parent=i.parent, type=i.task.type, target=i.target,
                target_kind=kind(i.target) if i.target is not None else None, calls=i.calls, source=i.task.source,
                retries=i.task.retries, timeout_seconds=i.task.timeout, runtime_macros=i.runtime_macros,
            )
            for i in exp.insts
        ]
        seen: set[tuple[str, str]] = set()
        edges = []
        for link in exp.links:
            if (link.src, link.dst) in seen:
                continue
            seen.add((link.src, link.dst))
            edges.append(CompiledEdge.model_validate({"from": link.src, "to": link.dst, "reason": link.reason}))
        self.action_cycles(exp)
        return CompiledAction(name=exp.label.rsplit("/", 1)[-1], level=level, owner=owner, system=system,
                              system_generated=system and not user_edited, user_edited=user_edited,
                              task_count=len(tasks), edge_count=len(edges), tasks=tasks, edges=edges)

    def action_cycles(self, exp: Expansion) -> None:
        """Cycles among the edges of an action (the runbooks' own, implicit ones, the generated or
        edited top level): an error per cycle, named in the runbook where it is."""
        graph = nx.DiGraph()
        for link in exp.links:
            if not graph.has_edge(link.src, link.dst):
                graph.add_edge(link.src, link.dst, source=link.source, why=link.why)
        if nx.is_directed_acyclic_graph(graph):
            return
        order = {inst.id: k for k, inst in enumerate(exp.insts)}
        for text in self.cycles(graph, order, f"cycle in action {exp.label}"):
            self.errors[text] = None


def _contract(graph: nx.DiGraph, kept: set[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """For each kept node X, the kept nodes Y it reaches directly or through nodes that are not
    kept, with the data of X's first edge on the way.

    Only the nodes that a kept node reaches through non-kept ones are visited (each once, its
    set memoized): computing the sets of every node would build a transitive closure, quadratic
    on a long chain of entities that have no part in the action (services in a delete where only
    packages do something). The graph is acyclic here; the walk is iterative (no recursion limit).
    """
    through: dict[str, set[str]] = {}

    def reach(start: str) -> set[str]:
        if start in through:
            return through[start]
        pending: dict[str, set[str]] = {start: set()}
        stack = [(start, iter(graph.successors(start)))]
        while stack:
            node, successors = stack[-1]
            for succ in successors:
                if succ in kept:
                    pending[node].add(succ)
                elif succ in through:
                    pending[node] |= through[succ]
                elif succ not in pending:
                    pending[succ] = set()
                    stack.append((succ, iter(graph.successors(succ))))
                    break
            else:
                stack.pop()
                through[node] = pending.pop(node)
                if stack:
                    pending[stack[-1][0]] |= through[node]
        return through[start]

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for node in graph.nodes:
        if node not in kept:
            continue
        reaches: dict[str, dict[str, Any]] = {}
        for succ in graph.successors(node):
            data = graph.edges[node, succ]
            if succ in kept:
                reaches.setdefault(succ, data)
            else:
                for far in reach(succ):
                    reaches.setdefault(far, data)
        out[node] = reaches
    return out


class _Edits:
    """The seed's rules for user-edited system actions, across compiles.

    An app-level action named like a system action in spec.actions is the user's edit of it. An
    edit seen for the first time (or changed) is accepted: the action is user-edited. The same
    edit stays accepted while the dependency list is unchanged. When the dependency list changes,
    every accepted edit is thrown away (all actions are rebuilt as system-generated, and the
    caller emits a Warning Event). Kubernetes has no "do you want to proceed?": the edit stays in
    spec (Stead never writes spec), so it is remembered as discarded, by digest, and ignored until
    the user edits it again (a new digest) or removes it.
    """

    def __init__(self, previous: CompiledState | None, digest: str, edits: Mapping[str, tuple[int, str]]) -> None:
        before = {record.action: record for record in previous.edits} if previous is not None else {}
        changed = previous is not None and previous.dependency_digest != digest
        self.accepted: set[str] = set()
        self.records: list[EditRecord] = []
        self.discarded_now: list[str] = []
        self.warnings: list[str] = []
        self.paths: dict[str, str] = {}
        for name in SYSTEM_ACTIONS:
            if name not in edits:
                continue
            i, edit_digest = edits[name]
            self.paths[name] = f"spec.actions[{i}]"
            old = before.get(name)
            if old is not None and old.digest == edit_digest and (not old.accepted or changed):
                if old.accepted:
                    self.discarded_now.append(name)
                self.records.append(EditRecord(action=name, digest=edit_digest, accepted=False))
                self.warnings.append(f"spec.actions[{i}]: ignored: this edit of {name} was made before the dependency "
                                     "list changed; edit it again to apply it, or remove it")
            else:
                self.accepted.add(name)
                self.records.append(EditRecord(action=name, digest=edit_digest, accepted=True))

    def message(self) -> str | None:
        if not self.discarded_now:
            return None
        names = ", ".join(self.discarded_now)
        paths = ", ".join(self.paths[n] for n in self.discarded_now)
        return (f"the dependency list changed: the user-edited actions ({names}) were thrown away and all actions "
                f"rebuilt as system-generated; {paths} will be ignored until edited again")
