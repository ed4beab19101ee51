"""The configuration API's bodies: components and environments as the API shows them (Fuel's shape), and
read from a request's body into their specs (each problem named by its `body.` path)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from operators.config.models import ConfigComponentSpec, component_problems
from operators.environment.logic import spec_problems as environment_problems
from operators.environment.models import EnvironmentSpec
from operators.runtime import bad_request, field_path


def component_view(name: str, spec: ConfigComponentSpec) -> dict[str, Any]:
    definitions: dict[str, Any] = {}
    for resource in spec.resources:
        definition: dict[str, Any] = {}
        if resource.value_schema is not None:
            definition["schema"] = resource.value_schema
        if resource.description:
            definition["description"] = resource.description
        definitions[resource.name] = definition
    view: dict[str, Any] = {"id": name, "name": name, "resource_definitions": definitions}
    if spec.description:
        view["description"] = spec.description
    return view


def environment_view(name: str, spec: EnvironmentSpec) -> dict[str, Any]:
    return {
        "id": name, "name": name, "release": spec.release, "components": list(spec.components),
        "hierarchy_levels": list(spec.hierarchy_levels),
        "nodes": [node.model_dump(by_alias=True, exclude_none=True) for node in spec.nodes],
    }


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def component_spec(body: Mapping[str, Any]) -> ConfigComponentSpec:
    """A ConfigComponent spec from a request body in Fuel's shape (`resource_definitions` as a mapping of
    name to definition) or Stead's (`resources` as a list)."""
    definitions = body.get("resource_definitions", body.get("resourceDefinitions"))
    raw: dict[str, Any] = {}
    if definitions is not None:
        if not isinstance(definitions, dict):
            bad_request("body.resource_definitions: expected a mapping of resource name to definition")
        resources = []
        for name, definition in definitions.items():
            if definition is not None and not isinstance(definition, dict):
                bad_request(f"body.resource_definitions.{name}: expected a mapping")
            resources.append({"name": name, **(definition or {})})
        raw["resources"] = resources
    elif "resources" in body:
        raw["resources"] = body["resources"]
    if "description" in body:
        raw["description"] = body["description"]
    try:
        spec = ConfigComponentSpec.model_validate(raw)
    except ValidationError as error:
        bad_request("; ".join(f"body.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()))
    problems = component_problems(spec.model_dump(by_alias=True, exclude_none=True))
    if problems:
        bad_request("; ".join(p.replace("spec.", "body.", 1) for p in problems))
    return spec


def environment_spec(body: Mapping[str, Any]) -> tuple[str, EnvironmentSpec]:
    """The name and spec of an Environment from a request body in Fuel's shape (snake_case keys, `id` or
    `name`)."""
    name = body.get("name", body.get("id"))
    if not isinstance(name, str) or not name:
        bad_request("body.name: required, a string")
    raw = {_camel(k): v for k, v in body.items() if k not in ("id", "name")}
    try:
        spec = EnvironmentSpec.model_validate(raw)
    except ValidationError as error:
        bad_request("; ".join(f"body.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()))
    problems = environment_problems(spec.model_dump(by_alias=True))
    if problems:
        bad_request("; ".join(p.replace("spec.", "body.", 1) for p in problems))
    return name, spec
