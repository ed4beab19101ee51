"""A ServiceInstance's page in the console, shaped here, pure (issue 29): its lifecycle's diagram with the
current state lit and the path taken, the actions the lifecycle allows now, and its attribute sets as a diff.

Only the transfers the instance can be asked to take now are offered, as the admission webhook would
allow them (`operators.lsm.triggers`):

- **update**: the current state has an on_update transfer and the entity an rw+ attribute; only rw+
  attributes are editable (rw ones never change after creation, r ones are Stead's);
- **set-state**: one action per api_set_state transfer leaving the current state, named by its target;
- **delete**: the current state has an on_delete transfer (or the instance was never taken in: such an
  instance may always go).

Nothing is offered while a request is on its way (a state request or an update the operator has not taken
in yet: the next one would carry a stale version), nor to an instance that is deleted or being deleted.
The actions write what `stead service update|set-state` write (`operators.lsm.cli_actions`): a JSON merge
patch of spec.attributes with spec.currentVersion, or of spec.stateRequest {target, currentVersion, message}.

The attribute diff is structural: each attribute (a dict's members one by one, as `a.b`) is a row with its
value in each set as text, and how candidate differs from active (what an update would change) and active
from rollback (what the last promote changed). Values are text, drawn with textContent: never markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import ValidationError

from operators.console.views.lifecycle_diagram import Diagram, diagram
from operators.lsm.attributes import changed_keys
from operators.lsm.cli import typed_value
from operators.lsm.machine import pending_request
from operators.lsm.models import (
    AttributeSet,
    LifecycleSpec,
    ServiceEntitySpec,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
    StateRequest,
)
from operators.lsm.wire import merge_ready, read_instance_status
from operators.runtime import CommandError

ActionKind = Literal["update", "set-state", "delete"]
Change = Literal["same", "changed", "added", "removed"]
SETS: tuple[AttributeSet, ...] = ("candidate", "active", "rollback")


class Invalid(Exception):
    """A request the console refuses before sending it: `status` is the HTTP answer, the message names the field."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Action:
    """A transfer the instance can be asked to take now."""

    kind: ActionKind
    target: str
    """The state the transfer leads to."""
    transfer: int
    """Its index in the lifecycle's spec.transfers."""
    description: str | None
    validate: bool
    operation: str | None
    test: str
    """The element's data-test: action-update, action-set-state-<target>, action-delete."""


@dataclass(frozen=True)
class EditableField:
    """An rw+ attribute as the update form shows it: its value as text, read back by its type."""

    name: str
    type: str
    value: str
    optional: bool
    description: str | None


@dataclass(frozen=True)
class DiffRow:
    key: str
    """The attribute, or a member of a dict attribute as `attribute.member`."""
    candidate: str | None
    active: str | None
    rollback: str | None
    candidate_vs_active: Change | None
    """None when either set is absent."""
    active_vs_rollback: Change | None


@dataclass(frozen=True)
class AttributeDiff:
    present: dict[str, bool]
    """Which of the three sets the instance has."""
    rows: tuple[DiffRow, ...]


# --- the actions allowed now -----------------------------------------------------------------------


def busy(spec: ServiceInstanceSpec, status: ServiceInstanceStatus, generation: int | None) -> str | None:
    """Why the instance takes no new request now (one is on its way to the operator), or None."""
    if status.state is None:
        return None
    request = pending_request(spec, status)
    if request is not None:
        return f'the state request "{request.target}" has not been taken in yet'
    refused = status.refused
    handled = refused is not None and refused.trigger == "on_update" and refused.generation == generation
    if not handled and changed_keys(status.client_attributes or {}, spec.attributes):
        return "the update has not been taken in yet"
    return None


def allowed_actions(lifecycle: LifecycleSpec, status: ServiceInstanceStatus, *, deleting: bool = False,
                    entity: ServiceEntitySpec | None = None) -> tuple[Action, ...]:
    """The actions the lifecycle allows from the instance's current state (see the module docstring). Given the
    entity, an update is offered only when it has an rw+ attribute (with none, every update is refused)."""
    if deleting or status.deleted or status.delete_requested:
        return ()
    if status.state is None:
        return (Action("delete", "", -1, "not taken in yet: it may always go", False, None, "action-delete"),)
    state = next((s for s in lifecycle.states if s.name == status.state), None)
    if state is None or state.deleted:
        return ()
    out: list[Action] = []
    for index, transfer in enumerate(lifecycle.transfers):
        if transfer.source != status.state:
            continue
        found: list[tuple[ActionKind, str]] = []
        if transfer.on_update and (entity is None or any(a.modifier == "rw+" for a in entity.attributes)):
            found.append(("update", "action-update"))
        if transfer.api_set_state:
            found.append(("set-state", f"action-set-state-{transfer.target}"))
        if transfer.on_delete:
            found.append(("delete", "action-delete"))
        out.extend(Action(kind, transfer.target, index, transfer.description, transfer.validate_,
                          transfer.target_operation, test) for kind, test in found)
    order: dict[ActionKind, int] = {"update": 0, "set-state": 1, "delete": 2}
    return tuple(sorted(out, key=lambda a: (order[a.kind], a.transfer)))


def value_text(value: Any) -> str:
    """A value as the console shows it and the update form reads it back (`typed_value`): a string as
    written, anything else as JSON (`true`, `3`, `["a"]`)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def editable_fields(entity: ServiceEntitySpec | None, attributes: Mapping[str, Any]) -> tuple[EditableField, ...]:
    """The rw+ attributes, with the client's current values (`spec.attributes`)."""
    if entity is None:
        return ()
    return tuple(EditableField(a.name, a.type, "" if attributes.get(a.name) is None else value_text(
        attributes[a.name]), a.optional, a.description) for a in entity.attributes if a.modifier == "rw+")


# --- the writes ----------------------------------------------------------------------------------


def check_version(given: Any, status: ServiceInstanceStatus, name: str) -> int:
    """The version the user saw; the instance's version, else Invalid (409 when it moved on meanwhile)."""
    if not isinstance(given, int) or isinstance(given, bool) or given < 1:
        raise Invalid(422, "currentVersion: required, the version the page showed (a positive integer)")
    if given != status.version:
        raise Invalid(409, f"The given current version ({given}) doesn't match the actual current version "
                           f"({status.version}) of service instance {name}: the page shows it as it is now")
    return given


def offered(actions: Sequence[Action], kind: ActionKind, target: str | None = None) -> Action:
    """The action asked for, if it is offered now; Invalid (409) naming what is offered otherwise."""
    for action in actions:
        if action.kind == kind and (target is None or action.target == target):
            return action
    what = f"{kind} to {target!r}" if target is not None else kind
    allowed = ", ".join(f"{a.kind} {a.target}" if a.kind == "set-state" else a.kind for a in actions) or "none"
    raise Invalid(409, f"{what} is not allowed in the instance's current state (allowed now: {allowed})")


def update_patch(entity: ServiceEntitySpec | None, spec: ServiceInstanceSpec, given: Any, version: int
                 ) -> dict[str, Any]:
    """The merge patch of an update: the client's attributes with the edited rw+ ones, read by their types (an
    empty value of a non-string attribute removes it), and the version the user saw."""
    if not isinstance(given, Mapping) or not given:
        raise Invalid(422, "attributes: required, an object of the attributes to change (name: value as text)")
    fields = {f.name: f for f in editable_fields(entity, spec.attributes)}
    attributes = dict(spec.attributes)
    for name, text in given.items():
        field = fields.get(name)
        if field is None:
            raise Invalid(422, f"attributes.{name}: not an attribute an update may change (rw+ ones: "
                               f"{', '.join(fields) or 'none'})")
        if not isinstance(text, str):
            raise Invalid(422, f"attributes.{name}: expected the value as text")
        if text == "" and field.type != "string":
            attributes.pop(name, None)
            continue
        try:
            attributes[name] = typed_value(text, field.type)
        except CommandError as error:
            raise Invalid(422, f"attributes.{name}: {error}") from None
    if not changed_keys(spec.attributes, attributes):
        raise Invalid(422, "attributes: nothing changed")
    return {"spec": {"attributes": merge_ready(spec.attributes, attributes), "currentVersion": version}}


def state_patch(target: Any, version: int, message: Any = None) -> dict[str, Any]:
    """The merge patch of a state request, as `stead service set-state` writes it."""
    try:
        request = StateRequest(target=target, current_version=version, message=message or None)
    except ValidationError as error:
        first = error.errors()[0]
        raise Invalid(422, f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}") from None
    return {"spec": {"stateRequest": request.model_dump(by_alias=True, mode="json", exclude_none=True)}}


# --- the attribute sets --------------------------------------------------------------------------


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A set's leaves by dotted key: a dict's members one by one (an empty dict is one leaf), the rest whole."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


_ABSENT = object()


def _change(new: Mapping[str, Any] | None, old: Mapping[str, Any] | None, key: str) -> Change | None:
    if new is None or old is None:
        return None
    after, before = new.get(key, _ABSENT), old.get(key, _ABSENT)
    if after is _ABSENT:
        return "removed"
    if before is _ABSENT:
        return "added"
    return "same" if after == before and type(after) is type(before) else "changed"


def attribute_diff(candidate: Mapping[str, Any] | None, active: Mapping[str, Any] | None,
                   rollback: Mapping[str, Any] | None) -> AttributeDiff:
    """The three sets side by side, key by key (see the module docstring)."""
    sets = {"candidate": candidate, "active": active, "rollback": rollback}
    flat = {name: None if values is None else _flatten(values) for name, values in sets.items()}
    keys = sorted({key for values in flat.values() if values is not None for key in values})

    def text(name: str, key: str) -> str | None:
        values = flat[name]
        return None if values is None or key not in values else value_text(values[key])

    rows = tuple(DiffRow(
        key=key, candidate=text("candidate", key), active=text("active", key), rollback=text("rollback", key),
        candidate_vs_active=_change(flat["candidate"], flat["active"], key),
        active_vs_rollback=_change(flat["active"], flat["rollback"], key)) for key in keys)
    return AttributeDiff(present={name: values is not None for name, values in sets.items()}, rows=rows)


# --- the page ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstancePage:
    name: str
    namespace: str
    entity: str
    state: str | None
    version: int | None
    diagram: Diagram | None
    lifecycle_problem: str | None
    """Why there is no diagram (the lifecycle could not be read or parsed)."""
    actions: tuple[Action, ...]
    busy: str | None
    fields: tuple[EditableField, ...]
    diff: AttributeDiff
    refused: dict[str, Any] | None
    validation_problems: tuple[str, ...]


def read_instance(obj: Mapping[str, Any]) -> tuple[ServiceInstanceSpec, ServiceInstanceStatus]:
    """An instance's spec and status as the engine reads them; Invalid (409) when the spec is not valid."""
    meta = obj.get("metadata") or {}
    try:
        spec = ServiceInstanceSpec.model_validate(dict(obj.get("spec") or {}))
    except ValidationError:
        raise Invalid(409, f"service instance {meta.get('name')} has an invalid spec: see its conditions") from None
    return spec, read_instance_status(obj.get("status") or {})


def instance_page(obj: Mapping[str, Any], lifecycle: LifecycleSpec | None, entity: ServiceEntitySpec | None,
                  lifecycle_problem: str | None = None) -> dict[str, Any]:
    """Everything the view draws, as JSON: `obj` is the instance as the API server gave it to the user."""
    meta = obj.get("metadata") or {}
    spec, status = read_instance(obj)
    deleting = bool(meta.get("deletionTimestamp"))
    waiting = busy(spec, status, meta.get("generation"))
    actions = () if lifecycle is None or waiting is not None else allowed_actions(
        lifecycle, status, deleting=deleting, entity=entity)
    page = InstancePage(
        name=str(meta.get("name")), namespace=str(meta.get("namespace")), entity=spec.entity, state=status.state,
        version=status.version,
        diagram=None if lifecycle is None else diagram(lifecycle, status.state, status.log),
        lifecycle_problem=lifecycle_problem, actions=actions, busy=waiting,
        fields=editable_fields(entity, spec.attributes) if any(a.kind == "update" for a in actions) else (),
        diff=attribute_diff(status.candidate_attributes, status.active_attributes, status.rollback_attributes),
        refused=None if status.refused is None else status.refused.model_dump(mode="json"),
        validation_problems=tuple(status.validation_problems or ()))
    return asdict(page)
