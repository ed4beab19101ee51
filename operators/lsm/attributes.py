"""Attributes against their ServiceEntity: types, modifiers, defaults and the service identity.

Two kinds of rule, refused differently:

- what a client may send (`client_problems`, `changed_after_creation`): r attributes never, rw
  ones only at creation, names the entity does not have never. These are refused on the request
  (422), whatever the lifecycle says.
- what an attribute set must be to pass a validation (`set_problems`): types, required values.
  These are the lifecycle's business: a validating transfer takes its error path with them as the
  reason (Inmanta's way: a bad create lands in `rejected`, where an update can fix it).

Messages name the attribute by path (`spec.attributes.port`, `status.activeAttributes.port`) and never
quote a value: an attribute may be large, and the message goes into Events and logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from operators.lsm import embedded
from operators.lsm.jsontypes import json_type as json_type  # re-exported: callers read types here
from operators.lsm.jsontypes import type_fits as type_fits
from operators.lsm.models import AttributeDefinition, ServiceEntitySpec
from operators.lsm.relations import entity_relation_problems, shape_problems
from operators.runtime import FirstSeen, field_path, parse_spec


def definitions(entity: ServiceEntitySpec) -> dict[str, AttributeDefinition]:
    """The entity's attributes, its relations among them (each an attribute holding one name or a list of
    names: modifiers, required values and types apply to it alike)."""
    defs = {relation.name: relation.as_attribute() for relation in entity.inter_service_relations}
    return {**defs, **{attribute.name: attribute for attribute in entity.attributes}}


def _known(entity: ServiceEntitySpec) -> str:
    return ", ".join(definitions(entity)) or "none"


def client_problems(entity: ServiceEntitySpec, entity_name: str, values: Mapping[str, Any],
                    path: str = "spec.attributes") -> list[tuple[str, str]]:
    """(reason, message) for each attribute a client may never send: unknown names and r attributes."""
    defs = definitions(entity)
    problems: list[tuple[str, str]] = []
    for name in values:
        attribute = defs.get(name)
        if attribute is None:
            problems.append(("UnknownAttribute", f"{path}.{name}: not an attribute of service entity {entity_name} "
                                                 f"(attributes: {_known(entity)})"))
        elif attribute.modifier == "r":
            problems.append(("ReadOnlyAttribute", f"{path}.{name}: read-only (modifier r): Stead sets it from the "
                                                  "deployment, a client never does"))
        elif attribute.embedded is not None:
            problems += embedded.value_problems(attribute, values[name], f"{path}.{name}", client=True)
    return problems


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The names whose value differs between two client attribute sets (added, removed or changed)."""
    return [name for name in sorted({*old, *new}) if name not in old or name not in new or old[name] != new[name]]


def changed_after_creation(entity: ServiceEntitySpec, changed: list[str],
                           path: str = "spec.attributes") -> list[tuple[str, str]]:
    """(reason, message) for each changed attribute whose modifier forbids a change after creation (rw)."""
    defs = definitions(entity)
    return [("ImmutableAttribute", f"{path}.{name}: set at creation only (modifier rw); rw+ attributes may change")
            for name in changed if name in defs and defs[name].modifier == "rw"]


def changed_items(entity: ServiceEntitySpec, old: Mapping[str, Any], new: Mapping[str, Any], changed: list[str],
                  path: str = "spec.attributes") -> list[tuple[str, str]]:
    """(reason, message) for each change inside a changed rw+ embedded attribute that its items' rules
    forbid: a key changed, an rw attribute of a kept item changed (`operators.lsm.embedded`)."""
    defs = definitions(entity)
    return [problem for name in changed if name in defs and defs[name].modifier == "rw+"
            for problem in embedded.update_problems(defs[name], old.get(name), new.get(name), f"{path}.{name}")]


def with_defaults(entity: ServiceEntitySpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """The values, plus each absent attribute's default (r attributes' too: their initial value), and each
    embedded item's absent attributes' defaults."""
    out = dict(values)
    for attribute in entity.attributes:
        if attribute.name not in out and attribute.default is not None:
            out[attribute.name] = attribute.default
        if attribute.embedded is not None and out.get(attribute.name) is not None:
            out[attribute.name] = embedded.fill_defaults(attribute, out[attribute.name])
    return out


def set_problems(entity: ServiceEntitySpec, entity_name: str, values: Mapping[str, Any], path: str) -> list[str]:
    """Why an attribute set does not pass validation: unknown names, wrong types, nulls and absent values
    where the attribute is required. r attributes are Stead's to fill, so an absent one is no problem."""
    defs = definitions(entity)
    problems: list[str] = []
    for name, value in values.items():
        attribute = defs.get(name)
        if attribute is None:
            problems.append(f"{path}.{name}: not an attribute of service entity {entity_name} "
                            f"(attributes: {_known(entity)})")
        elif value is None:
            if not attribute.optional:
                problems.append(f"{path}.{name}: required (null given)")
        elif not type_fits(attribute.type, value):
            problems.append(f"{path}.{name}: expected {attribute.type}, got {json_type(value)}")
        else:
            problems += [message for _, message in embedded.value_problems(attribute, value, f"{path}.{name}",
                                                                           client=False)]
    for attribute in defs.values():
        if attribute.name not in values and not attribute.optional and attribute.modifier != "r":
            problems.append(f"{path}.{attribute.name}: required")
    return problems + shape_problems(entity, values, path)


def identity_value(entity: ServiceEntitySpec, values: Mapping[str, Any] | None) -> str | None:
    """The service identity's value as text (how status, columns and `<attribute>=<value>` ids show it)."""
    if entity.identity is None or not values or values.get(entity.identity) is None:
        return None
    return str(values[entity.identity])


def service_entity_problems(spec: Mapping[str, Any]) -> list[str]:
    """Every problem of a ServiceEntity spec, each naming its field: the schema's, then the semantic ones
    (those that need the lifecycle or the Blueprint are checked where they are known)."""
    try:
        entity = parse_spec(ServiceEntitySpec, spec)
    except ValidationError as error:
        return [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()]
    return entity_problems(entity)


def entity_problems(entity: ServiceEntitySpec) -> list[str]:
    """The problems of a ServiceEntity spec the schema accepted, each naming its field."""
    problems: list[str] = []
    seen = FirstSeen("spec.attributes", "attribute")
    for index, attribute in enumerate(entity.attributes):
        repeat = seen.repeat(index, attribute.name)
        if repeat is not None:
            problems.append(repeat)
        problems += embedded.default_problems(attribute, f"spec.attributes[{index}].default")
        problems += embedded.definition_problems(attribute, f"spec.attributes[{index}]")
    problems += entity_relation_problems(entity)
    defs = definitions(entity)
    if entity.identity is not None:
        identity = defs.get(entity.identity)
        if identity is None:
            problems.append(f"spec.identity: {entity.identity} is not an attribute (attributes: {_known(entity)})")
        else:
            if identity.modifier != "rw":
                problems.append(f"spec.identity: {entity.identity} has modifier {identity.modifier}; an identity is "
                                "rw (given at creation, never changed)")
            if identity.type not in ("string", "int"):
                problems.append(f"spec.identity: {entity.identity} is of type {identity.type}; an identity is a "
                                "string or an int")
            if identity.optional:
                problems.append(f"spec.identity: {entity.identity} is optional; an identity is required")
    if entity.realization is not None:
        for index, given in enumerate(entity.realization.inputs):
            if given.attribute not in defs:
                problems.append(f"spec.realization.inputs[{index}].attribute: {given.attribute} is not an attribute "
                                f"(attributes: {_known(entity)})")
        for index, taken in enumerate(entity.realization.outputs):
            filled = defs.get(taken.attribute)
            if filled is None:
                problems.append(f"spec.realization.outputs[{index}].attribute: {taken.attribute} is not an attribute "
                                f"(attributes: {_known(entity)})")
            elif filled.modifier != "r":
                problems.append(f"spec.realization.outputs[{index}].attribute: {taken.attribute} has modifier "
                                f"{filled.modifier}; only r attributes are filled from the App")
    return problems
