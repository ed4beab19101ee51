"""The Blueprint kind: Init -> Validated -> Provisioned, where Provisioned means compiled.

Compiling is pure (`compiler.compile_blueprint`); this module only translates between the
object and the compiler, and moves inline secrets into the vault at admission time, so that
no secret value is ever stored in the object.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

from operators.calm.compiler import compile_blueprint
from operators.calm.models import PRINTER_COLUMNS, BlueprintSpec, BlueprintStatus, CompiledState
from operators.calm.validation import spec_problems
from operators.runtime.kinds import AdmissionRequest, Kind, Refusal
from operators.runtime.kube import custom_path
from operators.runtime.pipeline import PermanentError, Pipeline, StepContext, TemporaryError
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


IN_USE_RECHECK_SECONDS = 10.0


async def release(ctx: StepContext) -> Mapping[str, Any]:
    """Deleting a blueprint: it is Deleted (no more launches) while apps launched from it exist,
    because they run its snapshot, which refers to its secrets in the vault; once none is left,
    its secrets leave the vault and the blueprint goes."""
    services: Services = ctx.services
    apps = await services.kube.request("GET", custom_path("apps", ctx.obj.namespace))
    users = sorted(str((a.get("metadata") or {}).get("name")) for a in apps.get("items") or []
                   if (a.get("spec") or {}).get("blueprint") == ctx.obj.name)
    if users:
        raise TemporaryError("InUse", f"deleted: waits until no app uses it ({', '.join(users)})",
                             delay=IN_USE_RECHECK_SECONDS, facts={"state": "Deleted"}, waiting=True)
    project = ctx.obj.labels.get(PROJECT_LABEL) or ctx.obj.namespace
    for ref in sorted(_vault_refs(ctx.obj.spec)):
        await services.vault.delete(project, ref)
    return {}


def _vault_refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        ref = node.get("vaultRef")
        if isinstance(ref, str) and ref != DRY_RUN_VAULT_REF:
            yield ref
        for value in node.values():
            yield from _vault_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _vault_refs(item)


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _inline_secrets(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every `secret: {value: ...}` anywhere under `node` (credentials, and secret variables of the
    application, substrates, packages and services), with its field path, in document order."""
    if isinstance(node, dict):
        secret = node.get("secret")
        if isinstance(secret, dict) and "value" in secret:
            yield f"{path}.secret", secret
        for key, value in node.items():
            yield from _inline_secrets(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _inline_secrets(item, f"{path}[{index}]")


async def move_inline_secrets(request: AdmissionRequest) -> dict[str, Any] | None:
    """Mutating webhook: each inline `secret.value` goes into the vault, leaving `secret.vaultRef`.

    The value is accepted once and is never stored in the object, nor in the copy of the manifest
    that `kubectl apply` keeps in an annotation. Mutating webhooks run before validating ones, so
    the spec is checked here first: a refused object writes nothing to the vault. A dry run gets
    the same answer with a placeholder uuid and writes nothing.
    """
    spec = copy.deepcopy(dict(request.spec))
    found = list(_inline_secrets(spec, "spec"))
    if not found:
        return None
    for path, secret in found:
        value = secret["value"]
        if set(secret) != {"value"}:
            raise Refusal(f"{path}: exactly one of secretRef, value, vaultRef must be set")
        if not isinstance(value, str) or not value.strip():
            raise Refusal(f"{path}.value: must not be empty")
    values = [secret.pop("value") for _, secret in found]
    for _, secret in found:
        secret["vaultRef"] = DRY_RUN_VAULT_REF
    problems = KIND.check_spec(spec)
    if problems:
        raise Refusal("; ".join(problems))
    refs: dict[str, str] = {}
    if not request.dry_run:
        services: Services = request.services
        project = request.labels.get(PROJECT_LABEL) or request.namespace
        for (path, secret), value in zip(found, values, strict=True):
            try:
                secret["vaultRef"] = refs[path] = await services.vault.put(project, value)
            except VaultError as error:  # its message names no value
                raise Refusal(f"{path}: not stored: {error}", code=500) from None
    patch: dict[str, Any] = {"spec": {key: spec[key] for key in {p.split(".")[1].split("[")[0] for p, _ in found}}}
    last_applied = request.annotations.get(LAST_APPLIED)
    if last_applied is not None:
        patch["metadata"] = {"annotations": {LAST_APPLIED: _scrub_last_applied(last_applied, refs)}}
    return patch


def _scrub_last_applied(text: str, refs: Mapping[str, str]) -> str | None:
    """kubectl's copy of the manifest, with each inline value replaced by its vault reference
    (dropped altogether if it cannot be read: better a full diff on the next apply than a leak)."""
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    for path, secret in _inline_secrets(manifest.get("spec") if isinstance(manifest, dict) else None, "spec"):
        secret.clear()
        secret["vaultRef"] = refs.get(path, DRY_RUN_VAULT_REF)
    return json.dumps(manifest, separators=(",", ":"))


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
    cleanup=release,
)
