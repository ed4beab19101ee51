"""Apply-time checks of a Blueprint spec that its schema cannot express.

The admission webhook calls `spec_problems` on every create and update, so it is linear in the
size of the spec, does no I/O and never quotes a value (a credential's or a variable's): only
names and field paths. Each message starts with the path of the field it is about, as kubectl
names it (`spec.deployments[0].substrate: ...`).

What is checked here: names (duplicates, the one namespace of entities and credentials that
macros address), references inside the spec (substrates, packages, services, credentials,
runbooks, actions, edge endpoints), the fields each task, substrate and variable type needs or
must not have, replica bounds, and macro syntax. What needs the whole graph (dependency cycles,
macros naming unknown attributes) is the compiler's: it ends in `Stalled`, not in a refusal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

from pydantic import ValidationError

from operators.calm import macros
from operators.calm.models import (
    SYSTEM_ACTIONS,
    Action,
    BlueprintSpec,
    Runbook,
    Substrate,
    Task,
    Variable,
)
from operators.runtime import FirstSeen, field_path

RESERVED_OBJECTS = frozenset(macros.ENTITY_KINDS)
"""Macro objects that mean "the one in the current context" (`@@{Deployment.x}@@`): no entity may take them."""
BUILTIN_PREFIX = "calm_"
"""Built-in macros (`@@{calm_array_index}@@`) start with this; no variable may."""

SUBSTRATE_ACTIONS = frozenset({"create", "delete"})
PACKAGE_ACTIONS = frozenset({"create", "delete"})

_TYPE_FIELDS: dict[str, frozenset[str]] = {
    "exec": frozenset({"script"}),
    "setvar": frozenset({"script", "variables"}),
    "http": frozenset({"http"}),
    "delay": frozenset({"delaySeconds"}),
    "callRunbook": frozenset({"runbook", "action"}),
}
_OPTIONAL_FIELDS = ("script", "variables", "http", "delaySeconds", "runbook", "action")


@dataclass(frozen=True)
class Entity:
    """An entity or credential of the blueprint, as the name index knows it."""

    kind: str  # Substrate, Deployment, Package, Service or Credential
    name: str
    path: str  # spec.services[2]
    index: int


@dataclass
class Index:
    """The names of a spec: one namespace for entities and credentials (macros address them by
    name alone), one for named runbooks. Built once; the compiler reuses it."""

    names: dict[str, Entity] = field(default_factory=dict)
    runbooks: dict[str, int] = field(default_factory=dict)
    deployment_of: dict[str, str] = field(default_factory=dict)  # substrate/package/service -> deployment

    def kind_of(self, name: str) -> str | None:
        entity = self.names.get(name)
        return entity.kind if entity else None


def spec_problems(spec: Mapping[str, Any]) -> list[str]:
    """Every problem of a Blueprint spec, each starting with its field path; [] when it is valid.

    Schema errors come first (as `Kind.check_spec` words them, without the input), then the
    semantic ones of `problems`.
    """
    try:
        model = BlueprintSpec.model_validate(dict(spec))
    except ValidationError as error:
        return [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors(include_input=False)]
    return problems(model)


def problems(spec: BlueprintSpec, parsed: dict[str, macros.Template] | None = None) -> list[str]:
    """The semantic problems of a schema-valid spec. `parsed` receives every text that parsed,
    keyed by its source, so that the compiler does not parse the scripts twice."""
    return _Checker(spec, parsed if parsed is not None else {}).run()


def build_index(spec: BlueprintSpec, out: list[str] | None = None) -> Index:
    """Index the names of a spec; duplicates and reserved names are reported into `out`."""
    index = Index()
    groups: Sequence[tuple[str, str, Sequence[Any]]] = (
        ("Credential", "credentials", spec.credentials),
        ("Substrate", "substrates", spec.substrates),
        ("Package", "packages", spec.packages),
        ("Service", "services", spec.services),
        ("Deployment", "deployments", spec.deployments),
    )  # the order of the fields in the spec: the first one met is "first"
    for kind, key, items in groups:
        for i, item in enumerate(items):
            path = f"spec.{key}[{i}]"
            name = item.name
            if name in RESERVED_OBJECTS:
                _add(out, f'{path}.name: "{name}" is reserved (a macro object meaning the one in context)')
                continue
            first = index.names.get(name)
            if first is not None:
                _add(out, f'{path}.name: duplicate name "{name}" (first at {first.path}.name; substrates, '
                          "deployments, packages, services and credentials share one namespace)")
                continue
            index.names[name] = Entity(kind, name, path, i)
    for i, runbook in enumerate(spec.runbooks):
        if runbook.name in index.runbooks:
            _add(out, f'spec.runbooks[{i}].name: duplicate runbook "{runbook.name}" '
                      f"(first at spec.runbooks[{index.runbooks[runbook.name]}].name)")
        else:
            index.runbooks[runbook.name] = i
    for i, deployment in enumerate(spec.deployments):
        members = [(deployment.substrate, f"spec.deployments[{i}].substrate")]
        members += [(p, f"spec.deployments[{i}].packages[{j}]") for j, p in enumerate(deployment.packages)]
        members += [(s, f"spec.deployments[{i}].services[{j}]") for j, s in enumerate(deployment.services)]
        for name, path in members:
            other = index.deployment_of.get(name)
            if other is None:
                index.deployment_of[name] = deployment.name
            elif other == deployment.name:
                _add(out, f'{path}: "{name}" is listed twice')
            else:
                _add(out, f'{path}: "{name}" is already in deployment "{other}" (each entity is in one)')
    return index


def _add(out: list[str] | None, message: str) -> None:
    if out is not None:
        out.append(message)


def callable_actions(spec: BlueprintSpec, index: Index, name: str) -> frozenset[str] | None:
    """The actions a callRunbook task may run on the entity `name` (None: not an entity)."""
    entity = index.names.get(name)
    if entity is None:
        return None
    if entity.kind == "Service":
        return frozenset(SYSTEM_ACTIONS) | {a.name for a in spec.services[entity.index].actions}
    if entity.kind == "Substrate":
        return SUBSTRATE_ACTIONS
    if entity.kind == "Package":
        return PACKAGE_ACTIONS
    return frozenset()


def task_texts(task: Task) -> Iterator[tuple[str, str]]:
    """The fields of a task that may hold macros, as (field path suffix, text)."""
    if task.script is not None:
        yield ".script", task.script
    if task.http is not None:
        yield ".http.url", task.http.url
        if task.http.body is not None:
            yield ".http.body", task.http.body
        for key, value in task.http.headers.items():
            yield f".http.headers.{key}", value


def substrate_texts(substrate: Substrate) -> Iterator[tuple[str, str]]:
    """The fields of a substrate (outside its runbooks) that may hold macros."""
    if substrate.manifest is not None:
        yield ".manifest", substrate.manifest
    if substrate.address is not None:
        yield ".address", substrate.address
    if substrate.readiness is not None:
        if substrate.readiness.script is not None:
            yield ".readiness.script", substrate.readiness.script
        if substrate.readiness.url is not None:
            yield ".readiness.url", substrate.readiness.url


def _macro_syntax(text: str, parsed: dict[str, macros.Template]) -> str | None:
    """The first macro syntax error of a text, worded with its position; None if it parses."""
    if text in parsed:
        return None
    try:
        parsed[text] = macros.parse(text)
    except macros.MacroError as error:
        return f"macro syntax error at position {error.position}: {error.message}"
    return None


class _Checker:
    """One pass over a spec, collecting problems in spec order."""

    def __init__(self, spec: BlueprintSpec, parsed: dict[str, macros.Template]) -> None:
        self.spec = spec
        self.parsed = parsed
        self.out: list[str] = []
        self.index = build_index(spec, self.out)

    def run(self) -> list[str]:
        spec = self.spec
        self.variables("spec.variables", spec.variables)
        for i, credential in enumerate(spec.credentials):
            if credential.secret.value is not None and not credential.secret.value.strip():
                self.out.append(f"spec.credentials[{i}].secret.value: must not be empty")
        for i, substrate in enumerate(spec.substrates):
            self.substrate(f"spec.substrates[{i}]", substrate)
        for i, package in enumerate(spec.packages):
            path = f"spec.packages[{i}]"
            self.variables(f"{path}.variables", package.variables)
            for key, runbook in (("install", package.install), ("uninstall", package.uninstall)):
                if runbook is not None:
                    self.runbook(f"{path}.{key}", runbook, owner=package.name)
            self.placed(path, package.name)
        for i, service in enumerate(spec.services):
            path = f"spec.services[{i}]"
            self.depends_on(path, service.name, service.depends_on)
            self.variables(f"{path}.variables", service.variables)
            self.actions(f"{path}.actions", service.actions, owner=service.name)
            self.placed(path, service.name)
        for i in range(len(spec.deployments)):
            self.deployment(i)
        self.actions("spec.actions", spec.actions, owner=None)
        for i, runbook in enumerate(spec.runbooks):
            self.runbook(f"spec.runbooks[{i}]", runbook, owner=None, named=True)
        return self.out

    # entities

    def placed(self, path: str, name: str) -> None:
        entity = self.index.names.get(name)
        if entity is not None and entity.path == path and name not in self.index.deployment_of:
            self.out.append(f'{path}: {entity.kind.lower()} "{name}" is in no deployment (list it in one, '
                            "or it never runs)")

    def substrate(self, path: str, substrate: Substrate) -> None:
        wanted = {"Local": set(), "Kubernetes": {"manifest"},
                  "Existing": {"address", "credential", "knownHosts"}}[substrate.type]
        given = {"manifest": substrate.manifest, "address": substrate.address, "credential": substrate.credential,
                 "port": substrate.port, "knownHosts": substrate.known_hosts}
        for key, value in given.items():
            if key in wanted and value is None:
                self.out.append(f"{path}.{key}: required for a substrate of type {substrate.type}")
            allowed = wanted | ({"port"} if substrate.type == "Existing" else set())
            if key not in allowed and value is not None:
                self.out.append(f"{path}.{key}: not used by a substrate of type {substrate.type}")
        if substrate.credential is not None:
            self.credential_ref(f"{path}.credential", substrate.credential)
            if substrate.type == "Existing":
                self.ssh_credential(path, substrate)
        check = substrate.readiness
        if check is not None:
            if check.type == "exec" and check.script is None:
                self.out.append(f"{path}.readiness.script: required for an exec readiness check")
            if check.type == "http" and check.url is None:
                self.out.append(f"{path}.readiness.url: required for an http readiness check")
            if check.type == "exec" and check.url is not None:
                self.out.append(f"{path}.readiness.url: only for an http readiness check")
            if check.type == "http" and check.script is not None:
                self.out.append(f"{path}.readiness.script: only for an exec readiness check")
        for suffix, text in substrate_texts(substrate):
            self.macro_syntax(path + suffix, text)
        self.variables(f"{path}.variables", substrate.variables)
        for key, runbook in (("preCreate", substrate.pre_create), ("postCreate", substrate.post_create),
                             ("postDelete", substrate.post_delete)):
            if runbook is not None:
                self.runbook(f"{path}.{key}", runbook, owner=substrate.name)
        self.placed(path, substrate.name)

    def deployment(self, i: int) -> None:
        deployment = self.spec.deployments[i]
        path = f"spec.deployments[{i}]"
        self.entity_ref(f"{path}.substrate", deployment.substrate, "Substrate")
        for j, name in enumerate(deployment.packages):
            self.entity_ref(f"{path}.packages[{j}]", name, "Package")
        for j, name in enumerate(deployment.services):
            self.entity_ref(f"{path}.services[{j}]", name, "Service")
        self.depends_on(path, deployment.name, deployment.depends_on)
        low, default, high = deployment.replicas
        if not low <= default <= high:
            self.out.append(f"{path}: replicas must satisfy minReplicas <= defaultReplicas <= maxReplicas "
                            f"(got {low} <= {default} <= {high})")

    def entity_ref(self, path: str, name: str, kind: str) -> None:
        found = self.index.kind_of(name)
        if found is None:
            self.out.append(f'{path}: no {kind.lower()} "{name}"')
        elif found != kind:
            self.out.append(f'{path}: "{name}" is a {found.lower()}, not a {kind.lower()}')

    def ssh_credential(self, path: str, substrate: Substrate) -> None:
        """An Existing substrate logs in with a key credential; all of a blueprint's Existing
        substrates with the same key (a run holds one ssh private key)."""
        credential = next((c for c in self.spec.credentials if c.name == substrate.credential), None)
        if credential is None:
            return
        if credential.type != "key":
            self.out.append(f'{path}.credential: credential "{credential.name}" is a {credential.type}; an Existing '
                            "substrate logs in over SSH with a private key only (a credential of type key)")
            return
        for other in self.spec.substrates:
            if other is substrate:
                break
            first = next((c for c in self.spec.credentials if c.name == other.credential), None)
            if (other.type == "Existing" and first is not None and first.type == "key"
                    and first.secret != credential.secret):
                self.out.append(f'{path}.credential: credential "{credential.name}" holds another key than credential '
                                f'"{first.name}" of substrate "{other.name}"; the Existing substrates of one blueprint '
                                "log in with one private key (their usernames may differ)")
                return

    def credential_ref(self, path: str, name: str) -> None:
        self.entity_ref(path, name, "Credential")

    def depends_on(self, path: str, name: str, names: Sequence[str]) -> None:
        seen: set[str] = set()
        for j, other in enumerate(names):
            where = f"{path}.dependsOn[{j}]"
            kind = self.index.kind_of(other)
            if kind is None:
                # Services name services, as a rule (Calm: "the logical unit we want to expose").
                what = "service" if path.startswith("spec.services") else "service, package, substrate or deployment"
                self.out.append(f'{where}: no {what} "{other}"')
            elif kind == "Credential":
                self.out.append(f'{where}: "{other}" is a credential, not an entity')
            elif other == name:
                self.out.append(f'{where}: "{name}" cannot depend on itself')
            elif other in seen:
                self.out.append(f'{where}: "{other}" is listed twice')
            seen.add(other)

    # variables

    def variables(self, path: str, variables: Sequence[Variable]) -> None:
        names = FirstSeen(path, "variable")
        for i, var in enumerate(variables):
            where = f"{path}[{i}]"
            if repeat := names.repeat(i, var.name):
                self.out.append(repeat)
            if var.name.startswith(BUILTIN_PREFIX):
                self.out.append(f'{where}.name: names starting with "{BUILTIN_PREFIX}" are for built-in macros')
            self.variable(where, var)

    def variable(self, where: str, var: Variable) -> None:
        if var.type == "secret":
            if var.value is not None:
                self.out.append(f"{where}.value: a secret variable takes its value from `secret`, never `value`")
            if var.secret is None and (var.mandatory and not var.runtime):
                self.out.append(f"{where}.secret: required for a mandatory secret variable not set at launch")
            if var.options or var.regex is not None:
                self.out.append(f"{where}: options and regex are not checked on secret variables; remove them")
            return
        if var.secret is not None:
            self.out.append(f"{where}.secret: only for variables of type secret")
        pattern: re.Pattern[str] | None = None
        if var.regex is not None:
            try:
                pattern = re.compile(var.regex)
            except re.error as error:
                self.out.append(f"{where}.regex: not a regular expression ({error.msg})")
        candidates = [(f"{where}.options[{k}]", option) for k, option in enumerate(var.options)]
        if var.value is not None:
            candidates.insert(0, (f"{where}.value", var.value))
        elif var.mandatory and not var.runtime:
            self.out.append(f"{where}.value: required (mandatory, and not set at launch)")
        for place, value in candidates:
            wrong = type_problem(var.type, value)
            if wrong is not None:
                self.out.append(f"{place}: {wrong}")
            elif pattern is not None and pattern.fullmatch(value) is None:
                self.out.append(f"{place}: does not match regex")
        if var.value is not None and var.options and var.value not in var.options:
            self.out.append(f"{where}.value: not one of options")

    # runbooks

    def actions(self, path: str, actions: Sequence[Action], owner: str | None) -> None:
        names = FirstSeen(path, "action")
        for i, action in enumerate(actions):
            where = f"{path}[{i}]"
            if repeat := names.repeat(i, action.name):
                self.out.append(repeat)
            extra: frozenset[str] = frozenset()
            if owner is None and action.name in SYSTEM_ACTIONS:
                # A user edit of a generated app-level action: its edges may name the generated
                # callRunbook tasks, which are named after the entities they run.
                extra = frozenset(n for n, e in self.index.names.items()
                                  if e.kind in ("Substrate", "Package", "Service"))
            self.runbook(where, action, owner=owner, extra_nodes=extra)

    def runbook(self, path: str, runbook: Runbook, owner: str | None, named: bool = False,
                extra_nodes: frozenset[str] = frozenset()) -> None:
        names = FirstSeen(f"{path}.tasks", "task")
        for i, task in enumerate(runbook.tasks):
            where = f"{path}.tasks[{i}]"
            if repeat := names.repeat(i, task.name):
                self.out.append(repeat)
            self.task(where, task, owner, named)
        for i, edge in enumerate(runbook.edges):
            for key, end in (("from", edge.from_), ("to", edge.to)):
                if end not in names and end not in extra_nodes:
                    self.out.append(f'{path}.edges[{i}].{key}: no task "{end}" in this runbook')
            if edge.from_ == edge.to:
                self.out.append(f'{path}.edges[{i}]: an edge from "{edge.to}" to itself')

    def task(self, where: str, task: Task, owner: str | None, named: bool) -> None:
        values: dict[str, object] = {"script": task.script, "variables": task.variables or None, "http": task.http,
                                     "delaySeconds": task.delay_seconds, "runbook": task.runbook,
                                     "action": task.action}
        allowed = _TYPE_FIELDS[task.type]
        for key in _OPTIONAL_FIELDS:
            if key not in allowed and values[key] is not None:
                self.out.append(f"{where}.{key}: not used by a task of type {task.type}")
        if task.type in ("exec", "setvar") and task.script is None:
            self.out.append(f"{where}.script: required for a task of type {task.type}")
        if task.type == "setvar":
            if not task.variables:
                self.out.append(f"{where}.variables: a setvar task must name the variables it sets")
            seen: set[str] = set()
            for k, name in enumerate(task.variables):
                if name in seen:
                    self.out.append(f'{where}.variables[{k}]: "{name}" is listed twice')
                seen.add(name)
        if task.type == "http":
            if task.http is None:
                self.out.append(f"{where}.http: required for a task of type http")
            elif task.http.credential is not None:
                self.credential_ref(f"{where}.http.credential", task.http.credential)
        if task.type == "delay" and task.delay_seconds is None:
            self.out.append(f"{where}.delaySeconds: required for a task of type delay")
        if task.target is not None:
            kind = self.index.kind_of(task.target)
            if kind is None:
                self.out.append(f'{where}.target: no service, package, substrate or deployment "{task.target}"')
            elif kind == "Credential":
                self.out.append(f'{where}.target: "{task.target}" is a credential, not an entity')
        if task.type == "callRunbook":
            self.call(where, task, owner, named)
        for suffix, text in task_texts(task):
            self.macro_syntax(where + suffix, text)

    def call(self, where: str, task: Task, owner: str | None, named: bool) -> None:
        if (task.runbook is None) == (task.action is None):
            self.out.append(f"{where}: a callRunbook task names exactly one of runbook and action")
            return
        if task.runbook is not None:
            if task.runbook not in self.index.runbooks:
                self.out.append(f'{where}.runbook: no runbook "{task.runbook}" in spec.runbooks')
            return
        target = task.target if task.target is not None else owner
        if target is None:
            if not named:  # a named runbook's default target is its caller's: checked when compiled
                self.out.append(f"{where}.target: required to call an action (which entity's action?)")
            return
        actions = callable_actions(self.spec, self.index, target)
        if actions is None:
            return  # an unknown target is reported above
        if task.action not in actions:
            kind = (self.index.kind_of(target) or "entity").lower()
            known = ", ".join(sorted(actions)) or "none"
            self.out.append(f'{where}.action: {kind} "{target}" has no action "{task.action}" (it has: {known})')

    def macro_syntax(self, path: str, text: str) -> None:
        if "@@{" not in text and "}@@" not in text:
            return
        problem = _macro_syntax(text, self.parsed)
        if problem is not None:
            self.out.append(f"{path}: {problem}")


def type_problem(kind: str, value: str) -> str | None:
    """Why a (non-secret) value does not fit its variable type, without quoting it; None if it fits."""
    if "@@{" in value:
        return None  # a macro: checked by the compiler, known at run time
    try:
        if kind == "int":
            int(value)
        elif kind == "dict":
            if not isinstance(json.loads(value), dict):
                return "not a JSON object (type dict)"
        elif kind == "date":
            date.fromisoformat(value)
        elif kind == "time":
            time.fromisoformat(value)
        elif kind == "datetime":
            datetime.fromisoformat(value)
    except ValueError:
        return f"not a valid {kind}"
    if kind == "string" and "\n" in value:
        return "a string variable holds one line (use type multiline)"
    return None
