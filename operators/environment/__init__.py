"""The Environment kind: Init -> Validated -> Provisioned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.environment.logic import components_condition, summarize
from operators.environment.models import ENVIRONMENT, EnvironmentSpec, EnvironmentStatus
from operators.runtime import (
    KIND_CONDITIONS,
    Kind,
    PermanentError,
    Pipeline,
    PrinterColumn,
    Resource,
    StepContext,
    object_key,
    spec_step,
)

CONFIG_COMPONENT = Resource("ConfigComponent", "configcomponents")
"""Named here rather than imported: the configuration domain builds on environments, not the
reverse (a test holds the two declarations equal)."""

KIND_DESCRIPTION = (
    "An environment (a Fuel cluster): its release, its nodes with their roles, the levels of "
    "its configuration hierarchy, its enabled components and plugins."
)


async def validate(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated: the admission webhook's checks again, for objects that bypassed it."""
    problems = KIND.check_spec(ctx.obj.spec, ctx.parsed_spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    return {}


@spec_step(EnvironmentSpec)
async def provision(ctx: StepContext[EnvironmentSpec]) -> Mapping[str, Any]:
    """Validated -> Provisioned: summarize nodes and roles, and say which enabled components do not
    exist (from the local store: Provisioned ConfigComponents, no API call)."""
    spec = ctx.spec
    prefix = object_key(CONFIG_COMPONENT.kind, ctx.obj.namespace, "")
    existing = {key.removeprefix(prefix) for key, _ in ctx.services.store.items(CONFIG_COMPONENT.kind)
                if key.startswith(prefix)}
    missing, condition = components_condition(spec.components, existing)
    return {**summarize(spec), "missingComponents": missing or None, KIND_CONDITIONS: [condition]}


KIND = Kind(
    kind=ENVIRONMENT.kind,
    plural=ENVIRONMENT.plural,
    short_names=("env",),
    description=KIND_DESCRIPTION,
    spec_model=EnvironmentSpec,
    status_model=EnvironmentStatus,
    pipeline=Pipeline(
        phases=("Init", "Validated", "Provisioned"),
        steps={"Init": validate, "Validated": provision},
    ),
    columns=(
        PrinterColumn("Release", ".spec.release", description="The release."),
        PrinterColumn("Nodes", ".status.nodeCount", type="integer", description="Node count."),
    ),
    # checked again when a ConfigComponent it enables appears, changes or goes
    depends_on={CONFIG_COMPONENT.kind: lambda spec, name: name in (spec.get("components") or ())},
)
