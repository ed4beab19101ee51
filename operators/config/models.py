"""The ConfigComponent and ConfigValues kinds (docs/configuration.md), and the checks the schema cannot make.

These models are the schema: `stead crds` generates the CRDs from them, the admission webhook
and the pipeline validate with them. Free-form data (a resource's values, a JSON schema) is
typed `FreeForm`, which the CRD renders as an object with `x-kubernetes-preserve-unknown-fields`
so the API server keeps it as written.

The semantic checks take their context as arguments (the Environment's spec, the components
by name, the other ConfigValues) rather than reading the cluster, so the admission webhook,
the pipeline and the HTTP API share one implementation and unit tests need no cluster.
Every message starts with the field path, as the Environment kind's do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationError, WithJsonSchema

from operators.config import schema as jsonschema
from operators.config.levels import (
    NODE_LEVEL,
    LevelError,
    Point,
    canonical_point,
    complete_level,
    find_node,
    point_from_level,
    role_problem,
)
from operators.environment.models import EnvironmentSpec
from operators.runtime import FirstSeen, Model, Resource, StatusBase, field_path, parse_spec

CONFIG_COMPONENT = Resource("ConfigComponent", "configcomponents")
CONFIG_VALUES = Resource("ConfigValues", "configvalues")

FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
DNS_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DnsName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_PATTERN)]
# URL-safe without escaping (RFC 3986 unreserved characters), segments joined by "/", so that a
# resource name can be written as is in the API's `/resources/<name>/values` paths.
RESOURCE_PATTERN = r"^[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$"
ResourceName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=RESOURCE_PATTERN)]
LevelValue = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[^/,=\s]+$")]
ConfigMapKey = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]

DEFAULT_HISTORY_LIMIT = 10


# --- ConfigComponent ----------------------------------------------------------------------


class ResourceDefinition(Model):
    """One resource (data source) a component provides."""

    name: ResourceName = Field(
        description="The resource's name, unique in the component: URL-safe characters, '/' allowed "
        "(astute, globals, override/plugins)."
    )
    description: str | None = Field(None, description="What the resource holds, for humans.")
    value_schema: FreeForm | None = Field(
        None,
        alias="schema",
        description="A JSON schema (Stead's supported subset) that every values and overrides object of "
        "this resource must satisfy. Absent: any mapping.",
    )


class ConfigComponentSpec(Model):
    """A component of the system and the definitions of the resources it provides."""

    description: str | None = Field(None, description="What the component is, for humans.")
    resources: list[ResourceDefinition] = Field(
        default_factory=list, description="The resources (data sources) this component defines, by unique name."
    )


class ConfigComponentStatus(StatusBase):
    """Written by Stead."""

    resource_count: int | None = Field(None, description="How many resources the component defines.")
    resources: list[str] | None = Field(None, description="The names of the resources the component defines.")


def component_problems(spec: Mapping[str, Any]) -> list[str]:
    """Semantic errors of a ConfigComponent spec: duplicate resources, schemas Stead cannot enforce."""
    problems: list[str] = []
    names = FirstSeen("spec.resources", "resource")
    for index, resource in enumerate(spec.get("resources") or []):
        if not isinstance(resource, Mapping):
            continue
        name = resource.get("name")
        if isinstance(name, str) and (repeat := names.repeat(index, name)):
            problems.append(repeat)
        if resource.get("schema") is not None:
            problems.extend(
                f"spec.resources[{index}].{p}" for p in jsonschema.schema_problems(resource["schema"])
            )
    return problems


# --- ConfigValues -------------------------------------------------------------------------


class PublishSpec(Model):
    """Where the effective values at this object's point are published for pods to mount."""

    config_map: DnsName = Field(description="The ConfigMap (in this namespace) that receives the effective values.")
    key: ConfigMapKey | None = Field(
        None, description="The ConfigMap key holding them (default values.json, or values.yaml with format yaml).")
    format: Literal["json", "yaml"] = Field("json", description="json (default) or yaml.")

    @property
    def data_key(self) -> str:
        """`key`, or the default that names the format."""
        return self.key or f"values.{self.format}"


class ConfigValuesSpec(Model):
    """Values or overrides of one resource, in one environment, at one point of its hierarchy."""

    environment: Name = Field(description="The Environment (in this namespace) these values belong to.")
    resource: ResourceName = Field(
        description="The resource (data source), defined by a ConfigComponent enabled in the environment."
    )
    kind: Literal["values", "overrides"] = Field(
        "values",
        description="values (the data of the resource at this level) or overrides (applied after the values "
        "of the same level). Default values.",
    )
    level: dict[str, LevelValue] = Field(
        default_factory=dict,
        description="The point of the hierarchy: {} is the environment root; otherwise a value for each of the "
        "environment's first levels, e.g. {role: controller} or {node: node-1.domain.tld}.",
    )
    data: FreeForm = Field(
        default_factory=dict, description="The data: any mapping (the resource's schema permitting)."
    )
    revert_to: int | None = Field(
        None, ge=1,
        description="Put this kept version's data in force instead of spec.data (recorded as a new version). "
        "Remove it to return to spec.data.",
    )
    history_limit: int | None = Field(
        None, ge=1, le=1000,
        description=f"How many versions to keep (default {DEFAULT_HISTORY_LIMIT}); older ones are deleted.",
    )
    publish: PublishSpec | None = Field(
        None, description="Publish the effective values at this point into a ConfigMap a pod can mount."
    )


class VersionInfo(Model):
    """One kept version of the data."""

    version: int = Field(description="The version number, from 1, never reused.")
    config_map: str = Field(description="The immutable ConfigMap holding this version's data.")
    data_hash: str = Field(description="SHA-256 of the data's canonical JSON.")
    created_at: str = Field(description="When the version was recorded (RFC 3339).")
    source: str = Field(description="spec (spec.data changed) or revert:<n> (spec.revertTo or a revert).")


class PublishedInfo(Model):
    """The last publication of the effective values."""

    config_map: str = Field(description="The ConfigMap written.")
    key: str = Field(description="The key written.")
    data_hash: str = Field(description="SHA-256 of the effective values published.")


class ConfigValuesStatus(StatusBase):
    """Written by Stead."""

    version: int | None = Field(None, description="The version of the data in force.")
    data_hash: str | None = Field(None, description="SHA-256 of the data in force.")
    point: str | None = Field(
        None, description="The hierarchy point in the environment's level order, e.g. role=controller,node=n1."
    )
    reverted_to: int | None = Field(None, description="The version put back in force by spec.revertTo, if any.")
    versions: list[VersionInfo] | None = Field(None, description="The kept versions, oldest first.")
    published: PublishedInfo | None = Field(None, description="The last publication of the effective values.")


@dataclass(frozen=True)
class ValuesContext:
    """What checking a ConfigValues needs beyond its spec, read from the cluster by the caller.

    `environment` is None when the Environment does not exist. `components` are the
    ConfigComponents of the namespace by name. `others` are the other ConfigValues of the
    namespace as (name, spec), for the one-object-per-point rule.
    """

    environment: EnvironmentSpec | None
    components: Mapping[str, ConfigComponentSpec]
    others: Iterable[tuple[str, Mapping[str, Any]]] = field(default_factory=tuple)
    name: str = ""


def parse_values_spec(spec: Mapping[str, Any]) -> tuple[ConfigValuesSpec | None, list[str]]:
    """The model, or the schema's errors named `spec.<field>`."""
    try:
        return parse_spec(ConfigValuesSpec, spec), []
    except ValidationError as error:
        return None, [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()]


def resource_definition(
    resource: str, env: EnvironmentSpec, components: Mapping[str, ConfigComponentSpec]
) -> ResourceDefinition | None:
    """The definition of `resource` by a component enabled in `env` (the first one listed)."""
    for name in env.components:
        component = components.get(name)
        if component is None:
            continue
        for definition in component.resources:
            if definition.name == resource:
                return definition
    return None


def unknown_resource_message(resource: str, environment: str, env: EnvironmentSpec,
                             components: Mapping[str, ConfigComponentSpec]) -> str:
    """Why `resource` is not available in `environment`, naming what the environment does enable."""
    missing = [name for name in env.components if name not in components]
    enabled = ", ".join(env.components) if env.components else "none"
    text = f'resource "{resource}" is not defined by any component enabled in environment "{environment}" ' \
           f"(enabled components: {enabled})"
    if missing:
        text += f"; ConfigComponent not found: {', '.join(missing)}"
    return text


def values_point(spec: ConfigValuesSpec, env: EnvironmentSpec) -> Point:
    """The canonical point of a valid spec (raises `LevelError` when the level does not fit).

    A level giving a node but not its role (`{node: node-1}` with levels `role, node`) is the
    node under its one role.
    """
    return canonical_point(point_from_level(complete_level(spec.level, env), env.hierarchy_levels), env)


def level_problems(level: Mapping[str, str], environment: str, env: EnvironmentSpec) -> list[str]:
    """Does the level fit the environment: a prefix of its hierarchy, with nodes it has, in their roles."""
    try:
        point = point_from_level(complete_level(level, env), env.hierarchy_levels)
    except LevelError as error:
        return [f'spec.level: {error} of environment "{environment}"']
    problems: list[str] = []
    for name, value in point:
        if name == NODE_LEVEL and find_node(env, value) is None:
            problems.append(f'spec.level.node: node "{value}" is not a node of environment "{environment}"')
    mismatch = role_problem(point, env)
    if mismatch is not None:
        problems.append(f"spec.level.role: {mismatch} in environment \"{environment}\"")
    return problems


def data_problems(data: Any, definition: ResourceDefinition, path: str = "spec.data") -> list[str]:
    """The data against the resource's schema (nothing when it has none or the schema is unusable)."""
    if definition.value_schema is None or jsonschema.schema_problems(definition.value_schema):
        return []
    return jsonschema.validate(data, definition.value_schema, path)


def values_problems(spec: Mapping[str, Any], ctx: ValuesContext) -> list[str]:
    """Everything wrong with a ConfigValues spec in its context, each message naming the field."""
    model, problems = parse_values_spec(spec)
    if model is None:
        return problems
    env = ctx.environment
    if env is None:
        return [f'spec.environment: Environment "{model.environment}" not found']
    problems.extend(level_problems(model.level, model.environment, env))
    definition = resource_definition(model.resource, env, ctx.components)
    if definition is None:
        problems.append("spec.resource: " + unknown_resource_message(model.resource, model.environment, env,
                                                                     ctx.components))
    else:
        problems.extend(data_problems(model.data, definition))
    if not problems:
        problems.extend(_duplicate_problems(model, env, ctx))
    return problems


def _duplicate_problems(model: ConfigValuesSpec, env: EnvironmentSpec, ctx: ValuesContext) -> list[str]:
    """One object per (environment, resource, kind, point): two would make the data ambiguous."""
    mine = values_point(model, env)
    for name, raw in ctx.others:
        if name == ctx.name:
            continue
        other, errors = parse_values_spec(raw)
        if other is None or errors:
            continue
        if (other.environment, other.resource, other.kind) != (model.environment, model.resource, model.kind):
            continue
        try:
            theirs = values_point(other, env)
        except LevelError:
            continue
        if theirs == mine:
            return [
                f'spec: ConfigValues "{name}" already holds the {model.kind} of resource "{model.resource}" '
                f'at this level of environment "{model.environment}"'
            ]
    return []
