"""The Blueprint kind: Init -> Validated -> Provisioned, where Provisioned means compiled.

Compiling is pure (`compiler.compile_blueprint`); this module only translates between the
object and the compiler, and moves inline secrets into the vault at admission time, so that
no secret value is ever stored in the object.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import hmac
import json
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from operators.calm.compiler import compile_blueprint
from operators.calm.models import APP, BLUEPRINT, PRINTER_COLUMNS, BlueprintSpec, BlueprintStatus, CompiledState
from operators.calm.names import BLUEPRINT_SHORT_NAMES
from operators.calm.validation import spec_problems
from operators.runtime import (
    AdmissionRequest,
    Kind,
    Objects,
    PermanentError,
    Pipeline,
    Refusal,
    SecretVault,
    Services,
    StepContext,
    TemporaryError,
    VaultError,
    spec_step,
)

DRY_RUN_VAULT_REF = "00000000-0000-4000-8000-000000000000"
"""What a dry run shows in place of a vault uuid: a dry run must not write to the vault."""


async def validate(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated: the admission checks again, for objects that bypassed the webhook."""
    problems = KIND.check_spec(ctx.obj.spec, ctx.parsed_spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems), facts={"state": "Error", "errors": problems})
    services: Services | None = ctx.services
    if services is not None:
        await services.vault.fetch(ctx.obj.namespace, [ref for _, ref in vault_refs(ctx.obj.spec)])
        try:
            await store_sealed(services.vault, ctx.obj.namespace, ctx.obj.name, ctx.obj.spec)
        except VaultError as error:  # the cluster copy could not be written: names no value
            raise TemporaryError("VaultUnavailable", str(error)) from None
    foreign = [] if services is None else foreign_refs(services.vault, ctx.obj.namespace, ctx.obj.name, ctx.obj.spec)
    if foreign:
        raise PermanentError("ForeignSecret", "; ".join(foreign), facts={"state": "Error", "errors": foreign})
    return {}


@spec_step(BlueprintSpec)
async def compile_step(ctx: StepContext[BlueprintSpec]) -> Mapping[str, Any]:
    """Validated -> Provisioned: compile; a cycle or an unknown macro reference is permanent."""
    spec = ctx.spec
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
    apps = await Objects(services.kube).list(APP, ctx.obj.namespace)
    users = sorted(str((a.get("metadata") or {}).get("name")) for a in apps
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
    for where, source in _vault_sources(node, path):
        yield f"{where}.vaultRef", source["vaultRef"]


def sealed_values(node: Any, path: str = "spec") -> Iterator[tuple[str, str, bytes | None]]:
    """Every `vaultRef` that comes with a `sealed` value, as (field path, uuid, blob); the blob is
    None when `sealed` is not base64 (then it opens nothing)."""
    for where, source in _vault_sources(node, path):
        sealed = source.get("sealed")
        if isinstance(sealed, str):
            blob: bytes | None = None
            with contextlib.suppress(binascii.Error, ValueError):
                blob = base64.b64decode(sealed, validate=True)
            yield f"{where}.vaultRef", source["vaultRef"], blob


def _vault_sources(node: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every mapping with a string `vaultRef` under `node`, with its field path."""
    if isinstance(node, Mapping):
        if isinstance(node.get("vaultRef"), str):
            yield path, node
        for key, value in node.items():
            yield from _vault_sources(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _vault_sources(item, f"{path}[{index}]")


def foreign_refs(vault: SecretVault, namespace: str, blueprint: str, spec: Mapping[str, Any],
                 dry_run: bool = False, already: Collection[str] = ()) -> list[str]:
    """The problems of `vaultRef`s that are not this blueprint's own secrets, one per field.

    A uuid of another namespace, of another object, or of nothing at all read the same: the
    message says only that this blueprint has no such secret. A dry run's placeholder passes
    only in a dry run. References `already` in the stored object pass: refusing them would
    refuse every later update of it, its finalizer's removal included (it stays Stalled instead,
    and no run of it opens them).
    """
    owner = secret_owner(blueprint)
    sealed = {path: blob for path, _, blob in sealed_values(spec)}
    problems: list[str] = []
    for path, ref in vault_refs(spec):
        if ref in already or (dry_run and ref == DRY_RUN_VAULT_REF) or _owner_of(vault, namespace, ref) == owner:
            continue
        if path in sealed:  # not stored yet: the object's own sealed value, if it opens for it here
            blob = sealed[path]
            problem = "its sealed value is not base64" if blob is None else _sealed_problem(
                vault, namespace, ref, blob, owner)
            if problem is None:
                continue
            problems.append(f"{path}: {ref} is not a secret of blueprint {blueprint} ({problem}; set "
                            "secret.value or secretRef instead)")
            continue
        problems.append(f"{path}: {ref} is not a secret of blueprint {blueprint} (set secret.value or secretRef "
                        "instead)")
    return problems


def _sealed_problem(vault: SecretVault, namespace: str, ref: str, blob: bytes, owner: str) -> str | None:
    try:
        problem = vault.sealed_problem(namespace, ref, blob, owner)
    except VaultError:  # not a uuid: the schema says so too
        return "not a uuid"
    return None if problem is None else problem.removeprefix(f"{ref}: ")


async def store_sealed(vault: SecretVault, namespace: str, blueprint: str, spec: Mapping[str, Any]) -> None:
    """Bring the object's sealed values into the vault (those it lacks); a blob that may not be this
    blueprint's entry is left out, and `foreign_refs` then names its field."""
    owner = secret_owner(blueprint)
    for _, ref, blob in sealed_values(spec):
        if blob is not None and _sealed_problem(vault, namespace, ref, blob, owner) is None:
            await vault.store_sealed(namespace, ref, blob, owner)


def _owner_of(vault: SecretVault, namespace: str, ref: str) -> str | None:
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
    """Mutating webhook: each inline `secret.value` becomes `secret.vaultRef` and `secret.sealed`.

    The value is accepted once and is never stored in the object in clear, nor in the copy of the
    manifest that `kubectl apply` keeps in an annotation: the object carries it encrypted for its
    namespace, uuid and blueprint (`Vault.seal`), and the operator stores that in the vault when
    it reconciles the object the API server really stored (`validate`). Admission writes nothing
    (issue 25, finding 2): a review that never becomes an object, a forged one included, leaves
    nothing behind, and its answer depends on no entry of the vault. A dry run gets a placeholder
    uuid. The only comparison with the vault is `_same_entry`'s, for authenticated reviews.
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
    refs: dict[str, dict[str, str]] = {}
    if not request.dry_run:
        if request.generated_name:
            raise Refusal("metadata.name: an inline secret value needs a fixed name (not generateName): "
                          "the vault records which blueprint owns it")
        services: Services = request.services
        owner = secret_owner(request.name)
        stored = dict(_vault_sources(((request.old or {}).get("spec") or {}) if request.authenticated else {}, "spec"))
        for (path, secret), value in zip(found, values, strict=True):
            try:
                # The same value applied again (a GitOps tool's every sync) keeps the entry the
                # stored object already has at this field (and its sealed copy); anything else is
                # a new entry.
                before = stored.get(path) or {}
                ref = await _same_entry(services.vault, request.namespace, owner, before.get("vaultRef"), value)
                if ref is None:
                    ref, blob = services.vault.seal(request.namespace, value, owner=owner)
                    sealed: Any = base64.b64encode(blob).decode("ascii")
                else:
                    sealed = before.get("sealed")
            except VaultError as error:  # its message names no value
                raise Refusal(f"{path}: not sealed: {error}", code=500) from None
            secret["vaultRef"] = ref
            if isinstance(sealed, str):
                secret["sealed"] = sealed
            refs[path] = dict(secret)
    patch: dict[str, Any] = {"spec": {key: spec[key] for key in {p.split(".")[1].split("[")[0] for p, _ in found}}}
    last_applied = request.annotations.get(LAST_APPLIED)
    if last_applied is not None:
        patch["metadata"] = {"annotations": {LAST_APPLIED: _scrub_last_applied(last_applied, refs)}}
    return patch


async def _same_entry(vault: SecretVault, namespace: str, owner: str, ref: str | None, value: str) -> str | None:
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


def _scrub_last_applied(text: str, refs: Mapping[str, Mapping[str, str]]) -> str | None:
    """kubectl's copy of the manifest, with each inline value replaced by what the object got in its
    place (its vaultRef and sealed value: so the next `kubectl apply` of an inline value removes
    both), and dropped altogether if it cannot be read: better a full diff on the next apply than
    a leak."""
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    for path, secret in _inline_secrets(manifest.get("spec") if isinstance(manifest, dict) else None, "spec"):
        secret.clear()
        secret.update(refs.get(path) or {"vaultRef": DRY_RUN_VAULT_REF})
    return json.dumps(manifest, separators=(",", ":"))


KIND = Kind(
    kind=BLUEPRINT.kind,
    plural=BLUEPRINT.plural,
    short_names=BLUEPRINT_SHORT_NAMES,
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
