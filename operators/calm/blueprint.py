"""The Blueprint kind: Init -> Validated -> Provisioned, where Provisioned means compiled.

Compiling is pure (`compiler.compile_blueprint`); this module only translates between the
object and the compiler, and moves inline secrets into the vault at admission time, so that
no secret value is ever stored in the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.calm.compiler import compile_blueprint
from operators.calm.models import PRINTER_COLUMNS, BlueprintSpec, BlueprintStatus, CompiledState
from operators.calm.validation import spec_problems
from operators.runtime.kinds import AdmissionRequest, Kind, Refusal
from operators.runtime.pipeline import PermanentError, Pipeline, StepContext
from operators.runtime.ring import PROJECT_LABEL
from operators.runtime.services import Services
from operators.runtime.vault import VaultError

DRY_RUN_VAULT_REF = "00000000-0000-4000-8000-000000000000"
"""What a dry run shows in place of a vault uuid: a dry run must not write to the vault."""


async def validate(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated: the admission checks again, for objects that bypassed the webhook."""
    problems = KIND.check_spec(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems), facts={"state": "Error", "errors": problems})
    return {}


async def compile_step(ctx: StepContext) -> Mapping[str, Any]:
    """Validated -> Provisioned: compile; a cycle or an unknown macro reference is permanent."""
    spec = BlueprintSpec.model_validate(dict(ctx.obj.spec))
    previous_raw = ctx.obj.status.get("compiledState")
    previous = CompiledState.model_validate(previous_raw) if previous_raw else None
    result = compile_blueprint(spec, previous)
    status = result.status(spec.active)
    if result.errors:
        reason = "DependencyCycle" if any("dependency cycle" in e for e in result.errors) else "CompileFailed"
        raise PermanentError(reason, "; ".join(result.errors), facts=status)
    services: Services | None = ctx.services
    if result.rebuilt and services is not None:
        services.events.record(ctx.obj, "Warning", "ActionsRebuilt", result.rebuilt_message or "actions rebuilt")
    return status


async def move_inline_secrets(request: AdmissionRequest) -> dict[str, Any] | None:
    """Mutating webhook: each inline `secret.value` goes into the vault, leaving `secret.vaultRef`.

    The value is accepted once and never stored in the object. A dry run gets the same shape
    with a placeholder uuid and writes nothing.
    """
    services: Services = request.services
    project = request.labels.get(PROJECT_LABEL) or request.namespace
    patch: dict[str, Any] = {}
    for field in ("credentials", "variables"):
        items = [dict(item) for item in request.spec.get(field) or [] if isinstance(item, Mapping)]
        changed = False
        for index, item in enumerate(items):
            secret = item.get("secret")
            if not isinstance(secret, Mapping) or not isinstance(secret.get("value"), str):
                continue
            if set(secret) != {"value"}:
                raise Refusal(f"spec.{field}[{index}].secret: exactly one of secretRef, value, vaultRef must be set")
            try:
                ref = DRY_RUN_VAULT_REF if request.dry_run else await services.vault.put(project, secret["value"])
            except VaultError as error:  # its message names no value
                raise Refusal(f"spec.{field}[{index}].secret: not stored: {error}", code=500) from None
            item["secret"] = {"vaultRef": ref}
            changed = True
        if changed:
            patch[field] = items
    return patch or None


KIND = Kind(
    kind="Blueprint",
    plural="blueprints",
    short_names=("bp",),
    description="A Calm application blueprint: variables, credentials, substrates, packages, services, "
    "deployments and actions. Compiled into system actions; Active blueprints launch Apps.",
    spec_model=BlueprintSpec,
    status_model=BlueprintStatus,
    pipeline=Pipeline(
        phases=("Init", "Validated", "Provisioned"),
        steps={"Init": validate, "Validated": compile_step},
    ),
    columns=PRINTER_COLUMNS,
    problems=spec_problems,
    mutation=move_inline_secrets,
)
