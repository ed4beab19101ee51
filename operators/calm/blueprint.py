"""The Blueprint kind: Init -> Validated -> Provisioned, where Provisioned means compiled.

Compiling is pure (`compiler.compile_blueprint`); this module only translates between the
object and the compiler, and moves inline secrets into the vault at admission time, so that
no secret value is ever stored in the object.
"""

from __future__ import annotations

import contextlib
import copy
import hmac
import json
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from operators.calm.compiler import compile_blueprint
from operators.calm.models import APP, BLUEPRINT, PRINTER_COLUMNS, BlueprintSpec, BlueprintStatus, CompiledState
from operators.calm.validation import spec_problems
from operators.runtime.core.kinds import AdmissionRequest, Kind, Refusal
from operators.runtime.core.pipeline import PermanentError, Pipeline, StepContext, TemporaryError
from operators.runtime.engine.services import Services
from operators.runtime.kube.client import custom_path
from operators.runtime.secrets import Vault, VaultError

DRY_RUN_VAULT_REF = "00000000-0000-4000-8000-000000000000"
"""What a dry run shows in place of a vault uuid: a dry run must not write to the vault."""


async def validate(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated: the admission checks again, for objects that bypassed the webhook."""
    problems = KIND.check_spec(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems), facts={"state": "Error", "errors": problems})
    services: Services | None = ctx.services
    if services is not None:
        await services.vault.fetch(ctx.obj.namespace, [ref for _, ref in vault_refs(ctx.obj.spec)])
    foreign = [] if services is None else foreign_refs(services.vault, ctx.obj.namespace, ctx.obj.name, ctx.obj.spec)
    if foreign:
        raise PermanentError("ForeignSecret", "; ".join(foreign), facts={"state": "Error", "errors": foreign})
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
    apps = await services.kube.request("GET", custom_path(APP.plural, ctx.obj.namespace))
    users = sorted(str((a.get("metadata") or {}).get("name")) for a in apps.get("items") or []
                   if (a.get("spec") or {}).get("blueprint") == ctx.obj.name)
    if users:
        raise TemporaryError("InUse", f"deleted: waits until no app uses it ({', '.join(users)})",
                             delay=IN_USE_RECHECK_SECONDS, facts={"state": "Deleted"}, waiting=True)
    owner = secret_owner(ctx.obj.name)
    for _, ref in sorted(vault_refs(ctx.obj.spec)):
        await services.vault.delete(ctx.obj.namespace, ref, owner=owner)  # another's uuid: left alone
    return {}


def secret_owner(blueprint: str) -> str:
    """How the vault names a blueprint that owns secrets (the namespace is the vault's project)."""
    return f"Blueprint/{blueprint}"


def vault_refs(node: Any, path: str = "spec") -> Iterator[tuple[str, str]]:
    """Every `vaultRef` under `node`, with its field path."""
    if isinstance(node, Mapping):
        ref = node.get("vaultRef")
        if isinstance(ref, str):
            yield f"{path}.vaultRef", ref
        for key, value in node.items():
            yield from vault_refs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from vault_refs(item, f"{path}[{index}]")


def foreign_refs(vault: Vault, namespace: str, blueprint: str, spec: Mapping[str, Any],
                 dry_run: bool = False, already: Collection[str] = ()) -> list[str]:
    """The problems of `vaultRef`s that are not this blueprint's own secrets, one per field.

    A uuid of another namespace, of another object, or of nothing at all read the same: the
    message says only that this blueprint has no such secret. A dry run's placeholder passes
    only in a dry run. References `already` in the stored object pass: refusing them would
    refuse every later update of it, its finalizer's removal included (it stays Stalled instead,
    and no run of it opens them).
    """
    owner = secret_owner(blueprint)
    return [f"{path}: {ref} is not a secret of blueprint {blueprint} (set secret.value or secretRef instead)"
            for path, ref in vault_refs(spec)
            if ref not in already and not (dry_run and ref == DRY_RUN_VAULT_REF)
            and _owner_of(vault, namespace, ref) != owner]


def _owner_of(vault: Vault, namespace: str, ref: str) -> str | None:
    try:
        return vault.owner_of(namespace, ref)
    except VaultError:  # not a uuid: the schema says so too
        return None


async def check_vault_refs(request: AdmissionRequest) -> None:
    """Validating webhook: every vaultRef must be a secret this blueprint stored itself."""
    services: Services = request.services
    already = {ref for _, ref in vault_refs((request.old or {}).get("spec") or {})}
    # the mutating call may have been served by another replica: its new entries are in the cluster copy
    with contextlib.suppress(VaultError):  # the cluster copy unreadable: judged on what this store has
        await services.vault.fetch(request.namespace,
                                   [ref for _, ref in vault_refs(request.spec) if ref not in already])
    problems = foreign_refs(services.vault, request.namespace, request.name, request.spec, request.dry_run, already)
    if problems:
        raise Refusal("; ".join(problems), code=403)


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
    the same answer with a placeholder uuid and writes nothing. A value is never looked up among
    the namespace's entries (that would be a guessing oracle): see `_same_entry`.
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
        if request.generated_name:
            raise Refusal("metadata.name: an inline secret value needs a fixed name (not generateName): "
                          "the vault records which blueprint owns it")
        services: Services = request.services
        owner = secret_owner(request.name)
        stored = dict(vault_refs((request.old or {}).get("spec") or {})) if request.authenticated else {}
        for (path, secret), value in zip(found, values, strict=True):
            try:
                # The same value applied again (a GitOps tool's every sync) keeps the entry the
                # stored object already has at this field; anything else is a new entry.
                ref = await _same_entry(services.vault, request.namespace, owner, stored.get(f"{path}.vaultRef"), value)
                if ref is None:
                    ref = await services.vault.put(request.namespace, value, owner=owner)
            except VaultError as error:  # its message names no value
                raise Refusal(f"{path}: not stored: {error}", code=500) from None
            secret["vaultRef"] = refs[path] = ref
    patch: dict[str, Any] = {"spec": {key: spec[key] for key in {p.split(".")[1].split("[")[0] for p, _ in found}}}
    last_applied = request.annotations.get(LAST_APPLIED)
    if last_applied is not None:
        patch["metadata"] = {"annotations": {LAST_APPLIED: _scrub_last_applied(last_applied, refs)}}
    return patch


async def _same_entry(vault: Vault, namespace: str, owner: str, ref: str | None, value: str) -> str | None:
    """`ref` when it is `owner`'s entry holding exactly `value`, else None.

    The only entry ever compared is the one the stored object (the API server's `old`, which only
    an authenticated review carries) names at the same field: the answer never depends on any
    other entry of the namespace, so a review cannot probe the vault for a value. (Before issue
    25 every entry of the blueprint was searched, and a forged review for another namespace
    answered with the victim's uuid when its guess was right.) The entry may have been written
    by another replica: `refreshed` reads it from the cluster copy.
    """
    if ref is None:
        return None
    try:
        current = await vault.refreshed(namespace, ref, owner)
    except VaultError:
        return None
    same = hmac.compare_digest(current.encode("utf-8", "surrogatepass"), value.encode("utf-8", "surrogatepass"))
    return ref if same else None


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
    kind=BLUEPRINT.kind,
    plural=BLUEPRINT.plural,
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
    admission=check_vault_refs,
    cleanup=release,
)
