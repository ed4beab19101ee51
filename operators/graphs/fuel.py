"""Fuel's task files as published, to and from the `Task` model.

Fuel's files are YAML lists of tasks with snake_case and dashed keys (`required_for`,
`cross-depends`, `cross-depended-by`), `role` as well as `roles` (a list or `'*'`), conditions
as `{yaql_exp: ...}` or a legacy string, and YAML anchors shared between tasks. `load_tasks`
translates them to the model (camelCase on the wire); `dump_tasks` writes Fuel's form back, so
that `stead graph download` produces a file Fuel's tools read.

Repeated keys in one mapping (upstream's openstack-network-tasks.yaml repeats `version` and
`tags` in the task `openstack-network-start`): PyYAML silently keeps the last. Stead accepts a
repeat whose value equals the first (upstream's case: nothing is lost, nothing is ambiguous)
and refuses a repeat with a different value, naming the file, the task and the key, since
either choice would silently drop what someone wrote.

Not supported (refused with a message, not ignored): `cross-depends` / `cross-depended-by` given
as `{yaql_exp: ...}` instead of a list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from operators.graphs.models import Task
from operators.runtime import field_path

MAX_FILE_BYTES = 8 * 1024 * 1024

# Fuel key -> model field (python name); keys absent here and from the model go to `custom`.
_KEYS: dict[str, str] = {
    "id": "id",
    "type": "type",
    "version": "version",
    "role": "roles",
    "roles": "roles",
    "groups": "groups",
    "tags": "tags",
    "requires": "requires",
    "required_for": "required_for",
    "cross-depends": "cross_depends",
    "cross_depends": "cross_depends",
    "cross-depended-by": "cross_depended_by",
    "cross_depended_by": "cross_depended_by",
    "condition": "condition",
    "parameters": "parameters",
    "strategy": "strategy",
    "reexecute_on": "reexecute_on",
    "refresh_on": "refresh_on",
    "fault_tolerance": "fault_tolerance",
    "tasks": "tasks",
}
# Model field -> the key `dump_tasks` writes (Fuel's published spelling).
_WRITE: dict[str, str] = {
    "roles": "roles",
    "required_for": "required_for",
    "cross_depends": "cross-depends",
    "cross_depended_by": "cross-depended-by",
}


class FuelFormatError(ValueError):
    """A task file Stead cannot take, with the file, the task and the field in the message."""


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated with a different value (see the module docstring)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Before SafeLoader flattens merge keys (`<<: *base`), whose overrides are not repeats.
        seen: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            value = self.construct_object(value_node, deep=True)
            try:
                hashable = key in seen
            except TypeError:
                continue
            if hashable and seen[key] != value:
                raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
            seen[key] = value
        return super().construct_mapping(node, deep=True)


def load_tasks(text: str, source: str = "<tasks>") -> list[Task]:
    """The tasks of one Fuel task file (a YAML list of tasks; an empty file is no tasks)."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise FuelFormatError(f"{source}: larger than {MAX_FILE_BYTES} bytes")
    try:
        data = yaml.load(text, Loader=_Loader)
    except _DuplicateKey as dup:
        raise FuelFormatError(
            f"{source}:{dup.line}: {_task_at(text, dup.line)}key {dup.key!r} is repeated with a different value "
            "(a repeat with the same value is accepted)"
        ) from None
    except yaml.YAMLError as error:
        raise FuelFormatError(yaml_problem(source, error)) from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise FuelFormatError(f"{source}: a task file is a list of tasks, not a {type(data).__name__}")
    tasks = []
    for index, raw in enumerate(data):
        tasks.append(task_from_fuel(raw, f"{source}: tasks[{index}]"))
    return tasks


def yaml_problem(source: str, error: yaml.YAMLError) -> str:
    """What is wrong with a YAML text, at `source:line:column` (PyYAML's own message names the text
    `<unicode string>` and draws a caret under a copy of the line: neither says which file)."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return f"{source}: not YAML: {' '.join(str(error).split())}"
    mark = error.problem_mark
    where = f"{source}:{mark.line + 1}:{mark.column + 1}"
    context = ""
    if error.context and error.context_mark is not None:
        context = f" ({error.context} at line {error.context_mark.line + 1})"
    return f"{where}: not YAML: {error.problem}{context}"


def load_file(path: str | Path) -> list[Task]:
    """The tasks of one file."""
    p = Path(path)
    return load_tasks(p.read_text(encoding="utf-8"), str(p))


def load_dir(path: str | Path) -> list[Task]:
    """The tasks of every `*.yaml` / `*.yml` file under a directory, files in path order (as
    `fuel2 graph upload -d` collects a module tree's tasks.yaml files)."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    tasks: list[Task] = []
    for file in files:
        tasks.extend(load_file(file))
    return tasks


def task_from_fuel(raw: Any, where: str = "task") -> Task:
    """One task in Fuel's form -> the model. `where` prefixes every message."""
    if not isinstance(raw, Mapping):
        raise FuelFormatError(f"{where}: a task is a mapping, not a {type(raw).__name__}")
    name = raw.get("id")
    label = f"{where} ({name})" if isinstance(name, str) else where
    fields: dict[str, Any] = {}
    custom: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise FuelFormatError(f"{label}: key {key!r} is not a string")
        target = _KEYS.get(key)
        if target is None:
            custom[key] = value
            continue
        if target in fields and fields[target] != _convert(target, value, label, key):
            raise FuelFormatError(f"{label}.{key}: conflicts with another spelling of the same field")
        fields[target] = _convert(target, value, label, key)
    if custom:
        fields["custom"] = custom
    try:
        return Task.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        raise FuelFormatError(
            f"{label}.{_fuel_path(first['loc'])}: {first['msg']}"
            + (f" (and {len(error.errors()) - 1} more)" if len(error.errors()) > 1 else "")
        ) from None


def _convert(field: str, value: Any, label: str, key: str) -> Any:
    if field in ("roles", "groups", "tags", "requires", "required_for", "reexecute_on", "refresh_on", "tasks"):
        if value is None:
            return []
        return [value] if isinstance(value, str) else value
    if field in ("cross_depends", "cross_depended_by"):
        if value is None:
            return []
        if isinstance(value, Mapping) and "yaql_exp" in value:
            raise FuelFormatError(f"{label}.{key}: the {{yaql_exp: ...}} form is not supported; list the "
                                  "dependencies ({name, role, policy})")
        if not isinstance(value, list):
            raise FuelFormatError(f"{label}.{key}: a list of {{name, role, policy}}")
        out = []
        for i, dep in enumerate(value):
            if not isinstance(dep, Mapping):
                raise FuelFormatError(f"{label}.{key}[{i}]: a mapping {{name, role, policy}}")
            item = dict(dep)
            role = item.get("role")
            if role is None:
                item.pop("role", None)
            elif isinstance(role, str):
                item["role"] = [role]
            out.append(item)
        return out
    if field == "condition":
        if value is None:
            return None
        if isinstance(value, bool):
            return {"legacy": "true" if value else "false"}
        if isinstance(value, str):
            return {"legacy": value}
        if isinstance(value, Mapping) and set(value) == {"yaql_exp"}:
            return {"yaqlExp": value["yaql_exp"]}
        raise FuelFormatError(f"{label}.condition: a string or {{yaql_exp: ...}}")
    if field == "fault_tolerance":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise FuelFormatError(f"{label}.fault_tolerance: a count, a percentage or a negative count")
        return str(value).strip()
    if field == "version" and value is not None:
        return str(value)
    return value


def _fuel_path(loc: tuple[int | str, ...]) -> str:
    fuel_names = {"required_for": "required_for", "cross_depends": "cross-depends",
                  "cross_depended_by": "cross-depended-by", "yaql_exp": "yaql_exp"}
    return field_path(tuple(fuel_names.get(p, p) if isinstance(p, str) else p for p in loc))


def _task_at(text: str, line: int) -> str:
    """`task 'x': ` for the task whose `- id:` precedes `line` (for messages), else ''."""
    current = None
    for number, content in enumerate(text.splitlines(), start=1):
        if number > line:
            break
        stripped = content.strip()
        if stripped.startswith("- id:") or (stripped.startswith("id:") and content.startswith("  ")):
            current = stripped.split(":", 1)[1].strip()
    return f"task {current!r}: " if current else ""


# --- writing Fuel's form ---------------------------------------------------------------------------


def task_to_fuel(task: Task) -> dict[str, Any]:
    """The model -> Fuel's form (empty fields left out, unknown keys back at the top level)."""
    out: dict[str, Any] = {"id": task.id, "type": task.type}
    if task.version is not None:
        out["version"] = task.version
    for field in ("roles", "groups", "tags"):
        value = getattr(task, field)
        if value:
            out[_WRITE.get(field, field)] = value[0] if value == ["*"] else list(value)
    for field in ("requires", "required_for"):
        value = getattr(task, field)
        if value:
            out[_WRITE.get(field, field)] = list(value)
    for field in ("cross_depends", "cross_depended_by"):
        deps = getattr(task, field)
        if deps:
            items = []
            for dep in deps:
                item: dict[str, Any] = {"name": dep.name}
                if dep.role != ["*"]:
                    item["role"] = dep.role[0] if dep.role in (["self"], ["master"]) else list(dep.role)
                if dep.policy != "all":
                    item["policy"] = dep.policy
                items.append(item)
            out[_WRITE[field]] = items
    if task.condition is not None:
        if task.condition.yaql_exp is not None:
            out["condition"] = {"yaql_exp": task.condition.yaql_exp}
        else:
            out["condition"] = task.condition.legacy
    if task.parameters:
        out["parameters"] = dict(task.parameters)
    if task.strategy is not None:
        out["strategy"] = task.strategy.model_dump(exclude_none=True)
    for field in ("reexecute_on", "refresh_on", "tasks"):
        value = getattr(task, field)
        if value:
            out[field] = list(value)
    if task.fault_tolerance is not None:
        ft = task.fault_tolerance
        out["fault_tolerance"] = int(ft) if not ft.endswith("%") else ft
    for key, value in task.custom.items():
        out.setdefault(key, value)
    return out


def dump_tasks(tasks: Iterable[Task]) -> str:
    """A Fuel task file (YAML) of the tasks, in order."""
    return yaml.safe_dump([task_to_fuel(t) for t in tasks], sort_keys=False, width=100, allow_unicode=True)
