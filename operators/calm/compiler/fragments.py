"""Runbooks become fragments, and actions expand into the tree of task instances they run."""

from __future__ import annotations

from typing import Literal

from operators.calm.compiler.state import CompileState
from operators.calm.compiler.structures import (
    MAX_TASKS_PER_ACTION,
    EdgeDef,
    Expansion,
    Inst,
    Link,
    RunbookDef,
    TaskDef,
    chain_edges,
    runbook_def,
    task_def,
    task_path,
)
from operators.calm.models import (
    SYSTEM_ACTIONS,
    Action,
    Substrate,
)
from operators.calm.validation import callable_actions, substrate_texts


class FragmentBuilder(CompileState):
    def build_fragments(self) -> None:
        spec = self.spec
        for i, substrate in enumerate(spec.substrates):
            self.substrate_fragments(f"spec.substrates[{i}]", substrate)
        for i, package in enumerate(spec.packages):
            path = f"spec.packages[{i}]"
            for action, key, runbook in (("create", "install", package.install),
                                         ("delete", "uninstall", package.uninstall)):
                if runbook is not None and runbook.tasks:
                    self.fragments[f"Package/{package.name}/{action}"] = runbook_def(
                        f"Package/{package.name}/{action}", runbook, f"{path}.{key}")
        for i, service in enumerate(spec.services):
            for j, service_action in enumerate(service.actions):
                key = f"Service/{service.name}/{service_action.name}"
                self.fragments[key] = runbook_def(key, service_action, f"spec.services[{i}].actions[{j}]")
        for i, named in enumerate(spec.runbooks):
            key = f"Runbook/{named.name}"
            self.fragments[key] = runbook_def(key, named, f"spec.runbooks[{i}]")
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
                self.fragments[f"Substrate/{name}/{key}"] = runbook_def(
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
                f"Substrate/{name}/create", path, tuple(steps),
                chain_edges(steps, path, "a substrate's steps run in order"))
        steps = []
        if substrate.type == "Kubernetes":
            steps.append(TaskDef("remove", "kubernetes", f"{path}.manifest", target=name,
                                 texts=((f"{path}.manifest", texts[".manifest"]),)))
        post_delete = call("postDelete")
        if post_delete is not None:
            steps.append(post_delete)
        if steps:
            self.fragments[f"Substrate/{name}/delete"] = RunbookDef(
                f"Substrate/{name}/delete", path, tuple(steps),
                chain_edges(steps, path, "a substrate's steps run in order"))

    def expand(self, label: str, root: RunbookDef, default_target: str | None) -> Expansion:
        expansion = Expansion(label)
        self._expand_into(expansion, root, None, default_target, (root.key,))
        return expansion

    def _expand_into(self, exp: Expansion, runbook: RunbookDef, prefix: str | None, default_target: str | None,
                     stack: tuple[str, ...]) -> None:
        for task in runbook.tasks:
            target = task.target if task.target is not None else default_target
            inst = Inst(task_path(prefix, task.name), prefix, task, target)
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
            exp.links.append(Link(task_path(prefix, edge.src), task_path(prefix, edge.dst), edge.reason, edge.source,
                                  edge.why))

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

    def user_expansions(self) -> list[tuple[Literal["Application", "Service"], str | None, Expansion]]:
        out: list[tuple[Literal["Application", "Service"], str | None, Expansion]] = []
        for i, action in enumerate(self.spec.actions):
            if action.name not in SYSTEM_ACTIONS:
                root = runbook_def(f"Application/{action.name}", action, f"spec.actions[{i}]")
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
        own = [task_def(t, f"{source}.tasks[{j}]") for j, t in enumerate(edit.tasks)]
        names = {t.name for t in own}
        tasks = [t for t in self.system_root(action).tasks if t.name not in names] + own
        edges = tuple(EdgeDef(e.from_, e.to, "user", f"{source}.edges[{k}]", f"edge {e.from_} -> {e.to} of the edit")
                      for k, e in enumerate(edit.edges))
        return RunbookDef(f"Application/{action}", source, tuple(tasks), edges)
