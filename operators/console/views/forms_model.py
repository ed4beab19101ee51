"""The console's forms, as pure data: the schema of each kind's form, the object a form starts from, the YAML
and the commands equivalent to what the user typed, the request a submission makes, and where an API
server's refusal belongs in the form.

The schema is the one `stead crds` writes into crds/ (`crd_for`, from the Pydantic models), served by
the console itself so that a user who may not read CustomResourceDefinitions still gets forms. The CRD drops
the models' defaults (the API server would write them into the user's spec); a form shows them as help, so
they are put back here from the same models. Nothing here validates: the API server does, as the user, with
`dryRun=All` first (schema, admission webhooks, ValidatingAdmissionPolicies), and `field_errors` places what
it says next to the field it names.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from operators import API_VERSION
from operators.catalog import KINDS
from operators.runtime import Kind, crd_for, custom_path

Mode = Literal["create", "edit", "patch"]
"""create: a new object (POST); edit: an object's spec, labels and annotations changed (a merge patch with
the resourceVersion the user saw); patch: an action that is a merge patch of one object (a state request)."""

BY_PLURAL: Mapping[str, Kind] = {kind.plural: kind for kind in KINDS}

SYSTEM_ACTIONS = ("create", "start", "stop", "restart", "delete")
"""The actions every App has (Calm's system actions), suggested in the run form beside its blueprint's own."""

SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "ownerReferences")
"""Metadata the API server writes: never part of a form's object, nor of the YAML shown for `kubectl apply`."""

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class FormRefused(ValueError):
    """A form the console cannot make or a submission it will not send (no such kind or action, an object of
    another kind than its route's): said to the user before anything reaches the API server."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def kind_of(plural: str) -> Kind:
    try:
        return BY_PLURAL[plural]
    except KeyError:
        raise FormRefused(f"no Stead kind {plural!r} (kinds: {', '.join(sorted(BY_PLURAL))})", 404) from None


# --- schemas ------------------------------------------------------------------------------------------


@functools.cache
def spec_schema(plural: str) -> dict[str, Any]:
    """The openAPIV3Schema of a kind's spec, as its CRD has it, with the models' defaults put back (help text,
    never sent). Cached: the models do not change while the console runs; callers get a copy."""
    kind = kind_of(plural)
    root = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec: dict[str, Any] = copy.deepcopy(root["properties"]["spec"])
    model = kind.spec_model.model_json_schema(by_alias=True, mode="validation")
    _with_defaults(spec, model, model.get("$defs") or {})
    return spec


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """A node of Pydantic's schema with its `$ref` and its optional `anyOf [X, null]` followed, as
    the CRD's `structural` follows them (the referring node's keys, such as a field's default, win)."""
    while True:
        if "$ref" in node:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            node = {**defs[str(node["$ref"]).rsplit("/", 1)[-1]], **rest}
            continue
        options = [o for o in node.get("anyOf") or () if o.get("type") != "null"]
        if len(options) == 1:
            node = {**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}
            continue
        return node


def _with_defaults(form: dict[str, Any], model: Mapping[str, Any], defs: Mapping[str, Any]) -> None:
    model = _resolve(model, defs)
    if model.get("default") is not None:
        form["default"] = copy.deepcopy(model["default"])
    known = model.get("properties") or {}
    for name, sub in (form.get("properties") or {}).items():
        if name in known:
            _with_defaults(sub, known[name], defs)
    for key in ("items", "additionalProperties"):
        if isinstance(form.get(key), dict) and isinstance(model.get(key), dict):
            _with_defaults(form[key], model[key], defs)


def kind_summary(kind: Kind) -> dict[str, Any]:
    return {"kind": kind.kind, "plural": kind.plural, "apiVersion": API_VERSION, "namespaced": not kind.cluster_scoped,
            "description": kind.description, "shortNames": list(kind.short_names)}


def catalog() -> list[dict[str, Any]]:
    """Every kind a form can create, and the actions a form can call, for the console's menus."""
    return [{**kind_summary(kind), "actions": [a.name for a in ACTIONS if a.on == kind.plural]} for kind in KINDS]


# --- the object a form starts from ------------------------------------------------------------------


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set `a.b.c` in nested mappings, making the missing ones (a prefill given in a console link)."""
    *parents, last = path.split(".")
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise FormRefused(f"{path}: {part} is not an object")
    node[last] = value


def new_form(plural: str, namespace: str, prefill: Mapping[str, str] = {}) -> dict[str, Any]:
    """The form creating an object of a kind, with string fields given in the link (`spec.app=web`) filled in.
    Only spec fields and the name: a link cannot set labels that would bypass nothing but could mislead."""
    kind = kind_of(plural)
    obj: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind.kind,
                           "metadata": {"name": "", **({"namespace": namespace} if not kind.cluster_scoped else {})},
                           "spec": {}}
    for path, value in prefill.items():
        if path.startswith("spec.") or path == "metadata.name":
            set_path(obj, path, value)
    return {**kind_summary(kind), "mode": "create", "title": f"New {kind.kind}", "schema": spec_schema(plural),
            "object": obj, "fixed": [], "suggestions": {}}


def editable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as the edit form holds it: what the user may change (spec, labels, annotations), its name and
    the resourceVersion the user saw (the edit is refused if the object changed since); no status, no
    server-written metadata."""
    meta = dict(obj.get("metadata") or {})
    kept: dict[str, Any] = {"name": meta.get("name", "")}
    if meta.get("namespace"):
        kept["namespace"] = meta["namespace"]
    for key in ("labels", "annotations"):
        values = {k: v for k, v in (meta.get(key) or {}).items() if k != LAST_APPLIED}
        if values:
            kept[key] = values
    kept["resourceVersion"] = meta.get("resourceVersion", "")
    return {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": obj.get("kind"), "metadata": kept,
            "spec": copy.deepcopy(dict(obj.get("spec") or {}))}


def edit_form(plural: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    kind = kind_of(plural)
    name = (obj.get("metadata") or {}).get("name", "")
    return {**kind_summary(kind), "mode": "edit", "title": f"Edit {kind.kind} {name}", "schema": spec_schema(plural),
            "object": editable(obj), "fixed": ["metadata.name"], "suggestions": {}}


# --- actions ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """An action a form calls on an object: a new object of `plural` that names it (a run), or a merge
    patch of the object itself (`patch`)."""

    name: str
    on: str
    label: str
    plural: str
    patch: bool = False


ACTIONS: tuple[Action, ...] = (
    Action("run", "apps", "Run an action", "actionruns"),
    Action("execute", "environments", "Execute graph types", "graphruns"),
    Action("set-state", "serviceinstances", "Request a state", "serviceinstances", patch=True),
)


def action_of(on: str, name: str) -> Action:
    for action in ACTIONS:
        if action.on == on and action.name == name:
            return action
    offered = [f"{a.on}/{a.name}" for a in ACTIONS]
    raise FormRefused(f"no action {name!r} on {on} (actions: {', '.join(offered)})", 404)


def action_form(on: str, action_name: str, target: Mapping[str, Any],
                blueprint: Mapping[str, Any] | None = None, graph_types: Sequence[str] = ()) -> dict[str, Any]:
    """The form calling an action on `target` (an object of `on`, as the API server gave it): the field that
    names the target is filled in and fixed. `blueprint` (an App's, when the user may read it) adds its
    actions to the suggestions of the run form; `graph_types` (an Environment's, when the user may read its
    DeploymentGraphs) are suggested in the execute form, with the Environment's nodes.

    A suggestion's path may write an array's index as `[]`: it is then offered in every item of the array
    (`spec.graphs[].type` in `spec.graphs[0].type` and in `spec.graphs[1].type`)."""
    action = action_of(on, action_name)
    kind = kind_of(action.plural)
    meta = target.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    base: dict[str, Any] = {**kind_summary(kind), "title": f"{action.label}: {kind_of(on).kind} {name}",
                            "action": action.name, "suggestions": {}}
    if action.name == "set-state":
        schema = spec_schema(action.plural)
        version = (target.get("status") or {}).get("version")
        request: dict[str, Any] = {"target": "", "currentVersion": version}
        states = [str(way).split()[2] for way in (target.get("status") or {}).get("waysOut") or []
                  if str(way).startswith("state request ") and len(str(way).split()) > 2]
        return {**base, "mode": "patch",
                "schema": {"type": "object", "required": ["stateRequest"],
                           "properties": {"stateRequest": copy.deepcopy(schema["properties"]["stateRequest"])}},
                "object": {"apiVersion": API_VERSION, "kind": kind.kind,
                           "metadata": {"name": name, "namespace": namespace}, "spec": {"stateRequest": request}},
                "fixed": ["metadata.name", "spec.stateRequest.currentVersion"],
                "suggestions": {"spec.stateRequest.target": states} if states else {}}
    if action.name == "run":
        spec: dict[str, Any] = {"app": name, "action": ""}
        fixed = ["spec.app"]
        user_actions = [str(a.get("name")) for a in ((blueprint or {}).get("status") or {}).get("actions") or []
                        if isinstance(a, Mapping) and a.get("name") and a.get("level", "Application") == "Application"]
        suggestions = {"spec.action": [*SYSTEM_ACTIONS, *(a for a in user_actions if a not in SYSTEM_ACTIONS)]}
    else:  # execute
        spec = {"environment": name, "graphs": [{"type": "default"}]}
        fixed = ["spec.environment"]
        nodes = [str(node["name"]) for node in (target.get("spec") or {}).get("nodes") or []
                 if isinstance(node, Mapping) and node.get("name")]
        suggestions = {path: values for path, values in (("spec.graphs[].type", list(graph_types)),
                                                         ("spec.graphs[].nodes[]", nodes)) if values}
    return {**base, "mode": "create", "schema": spec_schema(action.plural),
            "object": {"apiVersion": API_VERSION, "kind": kind.kind, "metadata": {"name": "", "namespace": namespace},
                       "spec": spec},
            "fixed": fixed, "suggestions": suggestions}


# --- what a form sends --------------------------------------------------------------------------------


def pruned(value: Any) -> Any:
    """A form's value without what the user left empty (None, "", empty lists and maps), so that an optional
    field not filled in is not sent and a required one is reported missing by the API server."""
    if isinstance(value, Mapping):
        out = {str(k): pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None and v != "" and v != {} and v != []}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


def generated_prefix(obj: Mapping[str, Any]) -> str | None:
    """The generateName of a run left unnamed, as the CLI makes it (`stead app run`: `<app>-<action>-`)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ActionRun" and spec.get("app"):
        stem = f"{spec['app']}-{spec.get('action') or 'run'}-"
    elif obj.get("kind") == "GraphRun" and spec.get("environment"):
        stem = f"{spec['environment']}-"
    else:
        return None
    return re.sub(r"[^a-z0-9.-]", "-", stem[:60].lower())


def outgoing(plural: str, mode: Mode, namespace: str, obj: Any) -> dict[str, Any]:
    """The object a submission sends (and the YAML shows): of the route's kind, in the route's namespace,
    pruned, top-level keys in kubectl's order, a run without a name given a generated one."""
    kind = kind_of(plural)
    if not isinstance(obj, Mapping):
        raise FormRefused("the form sent no object")
    if obj.get("kind") not in (None, kind.kind):
        raise FormRefused(f"kind {obj.get('kind')!r} sent to the form of {kind.kind}")
    meta = dict(pruned(obj.get("metadata") or {}))
    if kind.cluster_scoped:
        meta.pop("namespace", None)
    else:
        meta["namespace"] = namespace
    for key in SERVER_FIELDS:
        if key != "resourceVersion" or mode == "create":
            meta.pop(key, None)
    if mode == "create" and not meta.get("name"):
        meta.pop("name", None)
        prefix = generated_prefix({**obj, "kind": kind.kind})
        if prefix:
            meta["generateName"] = prefix
    order = ("name", "generateName", "namespace", "labels", "annotations")
    meta = {**{k: meta[k] for k in order if k in meta}, **{k: v for k, v in meta.items() if k not in order}}
    out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind.kind, "metadata": meta}
    out["spec"] = pruned(obj.get("spec") or {})
    return out


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) turning `old` into `new`: a key gone is null."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = copy.deepcopy(value)
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def edit_patch(current: Mapping[str, Any], edited: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch of an edit: spec, labels and annotations as the user left them, with the resourceVersion
    the user saw (the API server refuses it with 409 if the object changed since)."""
    before = editable(current)
    meta_before = {k: before["metadata"].get(k) or {} for k in ("labels", "annotations")}
    meta_after = {k: (edited.get("metadata") or {}).get(k) or {} for k in ("labels", "annotations")}
    metadata: dict[str, Any] = {k: v for k, v in merge_patch(meta_before, meta_after).items()}
    metadata["resourceVersion"] = str((edited.get("metadata") or {}).get("resourceVersion") or "")
    return {"metadata": metadata, "spec": merge_patch(before["spec"], edited.get("spec") or {})}


def _differences(before: Any, after: Any, path: str) -> list[str]:
    """The paths at which two values differ, as the API server names them (`spec.inputs.size`)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        found: list[str] = []
        for key in [*before, *(k for k in after if k not in before)]:
            if before.get(key) != after.get(key):
                found += _differences(before.get(key), after.get(key), f"{path}.{key}")
        return found
    return [] if before == after else [path]


def held_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The paths, of what an edit form holds (spec, labels, annotations), at which two versions of an object
    differ (a list is one value: it is replaced whole by a merge patch)."""
    old, new = editable(before), editable(after)
    found: list[str] = []
    for key in ("labels", "annotations"):
        found += _differences(old["metadata"].get(key) or {}, new["metadata"].get(key) or {}, f"metadata.{key}")
    return found + _differences(old["spec"], new["spec"], "spec")


def _overlap(one: str, other: str) -> bool:
    """Whether two paths name the same value or one holds the other (`spec.inputs` holds `spec.inputs.a`)."""
    return one == other or one.startswith(other + ".") or other.startswith(one + ".")


def rebased(edited: Mapping[str, Any], base: Mapping[str, Any] | None,
            current: Mapping[str, Any]) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """An edit as sent, and the object its patch is computed against.

    With `base`, the object the form was opened on, the edit is a three-way merge as `kubectl edit` does: its
    patch holds only what the user changed (base -> edited), sent at the object's present resourceVersion, so
    the operator's status writes, finalizers and labels since the form was opened neither refuse it nor are
    undone by it. Where someone else changed a value the user changed otherwise, the edit is refused (409), naming
    each such field, so that it overwrites nothing unseen. Without `base` (a client that does not send it),
    the patch turns the present object into the edited one, at the version the edit names."""
    if base is None:
        return dict(edited), current
    mine = held_changes(base, edited)
    unlike = held_changes(current, edited)  # a value both changed alike is no clash
    clashes = [path for path in held_changes(base, current)
               if any(_overlap(path, own) for own in mine) and any(_overlap(path, u) for u in unlike)]
    if clashes:
        raise EditConflict(clashes)
    version = str((current.get("metadata") or {}).get("resourceVersion") or "")
    return {**edited, "metadata": {**(edited.get("metadata") or {}), "resourceVersion": version}}, base


class EditConflict(FormRefused):
    """An edit whose fields another writer changed since the form was opened."""

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__(f"changed by someone else since this form was opened: {', '.join(paths)}; "
                         "open the form again to edit the object as it is now", 409)
        self.paths = list(paths)

    def refusal(self) -> dict[str, Any]:
        why = "changed by someone else since this form was opened"
        return {"ok": False, "status": self.status, "message": self.message,
                "errors": [FieldError(p, why, ancestors(p)).as_json() for p in self.paths]}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any
    content_type: str = "application/json"


def request_for(plural: str, mode: Mode, obj: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> Request:
    """The API request a submission makes (sent twice: with dryRun=All, then for real). `before` is the object
    an edit's patch is computed against (`rebased`)."""
    kind = kind_of(plural)
    meta = obj.get("metadata") or {}
    namespace = None if kind.cluster_scoped else str(meta.get("namespace") or "")
    if mode == "create":
        return Request("POST", custom_path(plural, namespace), obj)
    name = str(meta.get("name") or "")
    if not name:
        raise FormRefused("metadata.name: the object to change has no name")
    merge = "application/merge-patch+json"
    if mode == "edit":
        if before is None:
            raise FormRefused("an edit needs the object it changes")
        return Request("PATCH", custom_path(plural, namespace, name), edit_patch(before, obj), merge)
    return Request("PATCH", custom_path(plural, namespace, name), {"spec": dict(obj.get("spec") or {})}, merge)


# --- the YAML and the commands shown beside the form ------------------------------------------------


def manifest(obj: Mapping[str, Any]) -> str:
    """The YAML of the object as `kubectl apply -f -` would take it (no resourceVersion)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
    return yaml.safe_dump({**obj, "metadata": meta}, sort_keys=False, width=100, allow_unicode=True)


def _heredoc(command: str, text: str) -> str:
    """`command <<'EOF'` with the text, under a delimiter that no line of it is."""
    lines = set(text.splitlines())
    delimiter = "EOF"
    while delimiter in lines:
        delimiter += "_"
    return f"{command} <<'{delimiter}'\n{text}{'' if text.endswith(chr(10)) else chr(10)}{delimiter}"


def _pairs(flag: str, values: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value)
        out += [flag, f"{key}={text}"]
    return out


def _namespace_args(obj: Mapping[str, Any]) -> list[str]:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return ["-n", str(namespace)] if namespace else []


def stead_command(mode: Mode, obj: Mapping[str, Any]) -> str | None:
    """The `stead` command doing the same, where one says all the form says (else None: kubectl only)."""
    spec = dict(obj.get("spec") or {})
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    words: list[str] | None = None
    kind = obj.get("kind")
    if mode == "create" and kind == "App" and name and set(spec) <= {"blueprint", "inputs"}:
        words = ["stead", "app", "launch", name, "--blueprint", str(spec.get("blueprint", "")),
                 *_pairs("--input", spec.get("inputs") or {})]
    elif mode == "create" and kind == "ActionRun" and set(spec) <= {"app", "action", "arguments"} and (
            not name or name == meta.get("generateName")) and "generateName" in meta:
        words = ["stead", "app", "run", str(spec.get("app", "")), str(spec.get("action", "")),
                 *_pairs("--arg", spec.get("arguments") or {})]
    elif mode == "create" and kind == "GraphRun":
        words = _graph_execute(spec, name)
    elif mode == "create" and kind == "ServiceInstance" and name and set(spec) <= {"entity", "attributes"}:
        words = ["stead", "service", "create", str(spec.get("entity", "")), name,
                 *_pairs("--attr", spec.get("attributes") or {})]
    elif mode == "patch" and kind == "ServiceInstance":
        request = spec.get("stateRequest") or {}
        words = ["stead", "service", "set-state", name, str(request.get("target", ""))]
        if request.get("message"):
            words += ["--message", str(request["message"])]
    if words is None:
        return None
    return shlex.join([*words, *_namespace_args(obj)])


def _graph_execute(spec: Mapping[str, Any], name: str) -> list[str] | None:
    """`stead graph execute`: its flags give every type the same nodes and tasks; a run that limits them per
    type has no such command."""
    graphs = list(spec.get("graphs") or [])
    if not graphs or set(spec) - {"environment", "graphs", "dryRun", "noop", "force"} or (
            spec.get("dryRun") and spec.get("noop")):
        return None
    nodes, tasks = graphs[0].get("nodes") or [], graphs[0].get("tasks") or []
    if any((g.get("nodes") or []) != nodes or (g.get("tasks") or []) != tasks or set(g) - {"type", "nodes", "tasks"}
           for g in graphs):
        return None
    words = ["stead", "graph", "execute", "-e", str(spec.get("environment", "")),
             "-t", *(str(g.get("type", "")) for g in graphs)]
    if nodes:
        words += ["-N", *map(str, nodes)]
    if tasks:
        words += ["-T", *map(str, tasks)]
    words += [flag for field, flag in (("dryRun", "--dry-run"), ("noop", "--noop"), ("force", "--force"))
              if spec.get(field)]
    return [*words, *(["--name", name] if name else [])]


def kubectl_command(mode: Mode, obj: Mapping[str, Any]) -> str:
    """The kubectl command doing the same: apply (create when only a generateName is given: apply needs a
    name), or a merge patch for an action that is one."""
    if mode == "patch":
        kind = str(obj.get("kind", "")).lower()
        patch = json.dumps({"spec": obj.get("spec") or {}}, separators=(",", ":"))
        name = str((obj.get("metadata") or {}).get("name", ""))
        return shlex.join(["kubectl", "patch", kind, name, *_namespace_args(obj), "--type", "merge", "-p", patch])
    named = bool((obj.get("metadata") or {}).get("name"))
    return _heredoc("kubectl apply -f -" if named or mode == "edit" else "kubectl create -f -", manifest(obj))


def preview(plural: str, mode: Mode, namespace: str, obj: Any) -> dict[str, Any]:
    """What the page shows beside the form, as the user types: the YAML and the equivalent commands."""
    out = outgoing(plural, mode, namespace, obj)
    return {"yaml": manifest(out), "kubectl": kubectl_command(mode, out), "stead": stead_command(mode, out)}


# --- the API server's refusals, placed in the form --------------------------------------------------

_PATH = r"(?:metadata|spec)(?:\.[A-Za-z0-9_$-]+|\[[^\]]*\])*"
_ENTRY = re.compile(rf"(?:^|(?<=[;,:] )|(?<=\[))(?P<path>{_PATH}|<nil>): ")
_ALREADY = re.compile(r'^\S+ "[^"]*" already exists')


@dataclass(frozen=True)
class FieldError:
    """One problem the API server named: `path` in kubectl's notation (`spec.graphs[0].type`), None when it
    names no field; `fallbacks` the path and its ancestors, nearest first, for a form that has no input at
    the path itself (a map's key, an item not rendered)."""

    path: str | None
    message: str
    fallbacks: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "fallbacks": list(self.fallbacks)}


def ancestors(path: str) -> tuple[str, ...]:
    """`spec.graphs[0].type` -> itself, `spec.graphs[0]`, `spec.graphs`, `spec`. A map's entry, which the API
    server's schema errors name `spec.inputs.size` and a form `spec.inputs[size]`, is tried both ways."""
    out = [path]
    cut = max(path.rfind("."), path.rfind("["))
    if path[cut:cut + 1] == "." and "." in path[:cut]:  # not `spec.x`: the top level is no map
        out.append(f"{path[:cut]}[{path[cut + 1:]}]")
    while True:
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            return tuple(out)
        path = path[:cut]
        out.append(path)


def field_errors(message: str) -> list[FieldError]:
    """Each problem in an API server's refusal, with the field it names.

    The API server lists the schema's problems as `<Kind> "<name>" is invalid: [path: problem, path: problem]`
    (one without brackets), an admission webhook of Stead's as `admission webhook "..." denied the request:
    path: problem; path: problem`; a name taken is `... "<name>" already exists` (metadata.name). A message that
    names no field is one entry without a path, shown at the top of the form."""
    if _ALREADY.match(message):
        return [FieldError("metadata.name", message, ancestors("metadata.name"))]
    starts = list(_ENTRY.finditer(message))
    if not starts:
        return [FieldError(None, message.strip())]
    found: list[FieldError] = []
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(message)
        text = message[match.end():end].rstrip().rstrip(";,").rstrip()
        if i + 1 == len(starts) and text.endswith("]") and message[:starts[0].start()].endswith("["):
            text = text[:-1]
        path = match.group("path")
        if path == "<nil>":  # the whole object (CEL rules not checked while the schema's problems remain)
            found.append(FieldError(None, text))
        else:
            found.append(FieldError(path, text, ancestors(path)))
    return found


def refusal(status: int, message: str) -> dict[str, Any]:
    """What the page gets when the API server refused a submission: the status, the whole message and each
    problem placed."""
    return {"ok": False, "status": status, "message": message,
            "errors": [e.as_json() for e in field_errors(message)]}


def reported(errors: Sequence[FieldError]) -> list[str]:
    """The paths named, in order (for tests and logs)."""
    return [e.path or "" for e in errors]
