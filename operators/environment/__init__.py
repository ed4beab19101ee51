"""The Environment kind: Init -> Validated -> Provisioned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.environment.logic import summarize
from operators.environment.models import ENVIRONMENT, EnvironmentSpec, EnvironmentStatus
from operators.runtime.core.kinds import Kind, PrinterColumn
from operators.runtime.core.pipeline import PermanentError, Pipeline, StepContext

KIND_DESCRIPTION = (
    "An environment (a Fuel cluster): its release, its nodes with their roles, the levels of "
    "its configuration hierarchy, its enabled components and plugins."
)


async def validate(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated: the admission webhook's checks again, for objects that bypassed it."""
    problems = KIND.check_spec(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    return {}


async def provision(ctx: StepContext) -> Mapping[str, Any]:
    """Validated -> Provisioned: summarize nodes and roles."""
    return summarize(EnvironmentSpec.model_validate(dict(ctx.obj.spec)))


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
)
