"""The compiler's own structures: results, runbook fragments, task instances, links, dependencies."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import networkx as nx

from operators.calm.models import (
    BlueprintState,
    BlueprintStatus,
    CompiledAction,
    CompiledState,
    DependencyEntry,
    Runbook,
    Task,
)
from operators.calm.validation import task_texts

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


@dataclass(frozen=True, slots=True)
class MacroDecision:
    """Calm's decision for one macro of one task instance of one action."""

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


def task_path(prefix: str | None, name: str) -> str:
    """A task instance's id: its path of names under its caller's (`S1/install/configure`)."""
    return name if prefix is None else f"{prefix}/{name}"


def json_digest(data: Any) -> str:
    """SHA-256 of canonical JSON: equal data, equal digest, across compiles (the dependency list, edits)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def task_def(task: Task, source: str) -> TaskDef:
    """A spec task as the compiler keeps it, its texts named by their path in the spec (`source`)."""
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


def runbook_def(key: str, runbook: Runbook, source: str) -> RunbookDef:
    """A spec runbook as a fragment: its tasks and its spec edges, each naming where it comes from."""
    tasks = tuple(task_def(t, f"{source}.tasks[{j}]") for j, t in enumerate(runbook.tasks))
    edges = tuple(
        EdgeDef(e.from_, e.to, "spec", f"{source}.edges[{k}]", f"edge {e.from_} -> {e.to}")
        for k, e in enumerate(runbook.edges)
    )
    return RunbookDef(key, source, tasks, edges)


def chain_edges(tasks: Sequence[TaskDef], source: str, why: str) -> tuple[EdgeDef, ...]:
    """Inherent edges that run `tasks` one after the other, in order (a generated runbook's steps)."""
    return tuple(EdgeDef(a.name, b.name, "inherent", source, why) for a, b in itertools.pairwise(tasks))
