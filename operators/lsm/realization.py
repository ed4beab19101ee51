"""How an instance becomes an App and back: attributes to App inputs, App properties to r attributes,
and the Blueprint's variable rules as a validation of an attribute set.

An App's inputs are text (Calm variables), attributes are JSON: numbers and bools are written as
JSON writes them, strings as they are, dicts and lists as compact JSON; properties are read back
the same way, by the attribute's type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from operators.calm.app import input_problems
from operators.calm.models import BlueprintSpec
from operators.lsm.attributes import definitions, type_fits
from operators.lsm.machine import Validator
from operators.lsm.models import AttributeType, OutputMapping, ServiceEntitySpec


def as_input(value: Any) -> str:
    """An attribute value as an App input."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def from_property(kind: AttributeType, text: str) -> Any:
    """A property's text as a value of an attribute type; ValueError when it is not one."""
    if kind == "string":
        return text
    value = json.loads(text)
    if not type_fits(kind, value):
        raise ValueError(f"not a {kind}")
    return float(value) if kind == "float" else value


def app_inputs(entity: ServiceEntitySpec, values: Mapping[str, Any]) -> dict[str, str]:
    """The App's inputs from an attribute set (the active one); absent and null attributes give none,
    so the Blueprint's default applies."""
    if entity.realization is None:
        return {}
    return {m.variable: as_input(values[m.attribute]) for m in entity.realization.inputs
            if values.get(m.attribute) is not None}


def app_outputs(entity: ServiceEntitySpec, app_status: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The r attributes an App's status holds (its `entities`), and why any could not be read."""
    if entity.realization is None:
        return {}, []
    defs = definitions(entity)
    entities = app_status.get("entities") or {}
    values: dict[str, Any] = {}
    problems: list[str] = []
    for mapping in entity.realization.outputs:
        text = _property(entities, mapping)
        where = f"property {mapping.property_}" + (f" of {mapping.deployment}[{mapping.replica}]"
                                                   if mapping.deployment else "")
        if text is None:
            problems.append(f"{mapping.attribute}: the App has no {where}")
            continue
        attribute = defs.get(mapping.attribute)
        if attribute is None:
            continue
        try:
            values[mapping.attribute] = from_property(attribute.type, text)
        except ValueError:  # json.JSONDecodeError is one
            problems.append(f"{mapping.attribute}: the App's {where} is not a {attribute.type}")
    return values, problems


def _property(entities: Mapping[str, Any], mapping: OutputMapping) -> str | None:
    if mapping.deployment is None:
        value = (entities.get("properties") or {}).get(mapping.property_)
        return None if value is None else str(value)
    for deployment in entities.get("deployments") or ():
        if deployment.get("name") != mapping.deployment:
            continue
        for replica in deployment.get("replicas") or ():
            if replica.get("index") == mapping.replica:
                value = (replica.get("properties") or {}).get(mapping.property_)
                return None if value is None else str(value)
    return None


def blueprint_rules(entity: ServiceEntitySpec, blueprint: BlueprintSpec) -> Validator:
    """A validation of attribute sets by the Blueprint's runtime variables (types, options, regex,
    mandatory ones), as launching the App would check its inputs; each problem names the attribute under
    the set's path."""
    variable_of = {m.variable: m.attribute for m in entity.realization.inputs} if entity.realization else {}

    def check(values: Mapping[str, Any], path: str) -> list[str]:
        out = []
        for problem in input_problems(blueprint, app_inputs(entity, values), field=""):
            variable, _, rest = problem.removeprefix(".").partition(": ")
            attribute = variable_of.get(variable)
            where = f"Blueprint variable {variable}"
            if attribute is not None:
                where = f"{path}.{attribute} ({where})"
            out.append(f"{where}: {rest}")
        return out

    return check


def realization_problems(entity: ServiceEntitySpec, blueprint: BlueprintSpec, name: str) -> list[str]:
    """How an entity's realization does not fit its Blueprint (`name`), each naming the field: an input that
    is no runtime variable (or a secret one), a mandatory variable without a default that no required
    attribute gives, an output naming a deployment the Blueprint does not have."""
    if entity.realization is None:
        return []
    defs = definitions(entity)
    variables = {v.name: v for v in blueprint.variables}
    runtime = ", ".join(sorted(v.name for v in blueprint.variables if v.runtime and v.type != "secret")) or "none"
    problems: list[str] = []
    given: dict[str, str] = {}
    for index, mapping in enumerate(entity.realization.inputs):
        variable = variables.get(mapping.variable)
        path = f"spec.realization.inputs[{index}].variable"
        if variable is None or not variable.runtime:
            problems.append(f"{path}: {mapping.variable} is not a runtime variable of Blueprint {name} "
                            f"(runtime variables: {runtime})")
        elif variable.type == "secret":
            problems.append(f"{path}: {mapping.variable} is a secret variable of Blueprint {name}: an input "
                            "cannot give it")
        else:
            given[mapping.variable] = mapping.attribute
    for variable in blueprint.variables:
        if not (variable.runtime and variable.mandatory and not variable.value) or variable.type == "secret":
            continue
        attribute = defs.get(given.get(variable.name, ""))
        if attribute is None:
            problems.append(f"spec.realization.inputs: Blueprint {name} needs its mandatory variable "
                            f"{variable.name} (no default): map a required attribute to it")
        elif (attribute.optional or attribute.modifier == "r") and attribute.default is None:
            kind = "optional" if attribute.optional else "read-only (r)"
            problems.append(f"spec.realization.inputs: Blueprint variable {variable.name} is mandatory but "
                            f"attribute {attribute.name} is {kind} without a default: an instance without it "
                            "could not be deployed")
    deployments = [d.name for d in blueprint.deployments]
    for index, output in enumerate(entity.realization.outputs):
        if output.deployment is not None and output.deployment not in deployments:
            problems.append(f"spec.realization.outputs[{index}].deployment: Blueprint {name} has no deployment "
                            f"{output.deployment} (deployments: {', '.join(deployments) or 'none'})")
    return problems
