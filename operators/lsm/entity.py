"""The service catalog's kinds at work: Lifecycle and ServiceEntity steps and admission.

A **Lifecycle** is checked whole (`lifecycle_problems`: unknown states, operations, a failure with
nowhere to go, ambiguous or looping transfers, unreachable deleted states) at apply time, and its
status shows each state's model state. The built-in lifecycles are not objects: they are in code
(`operators.lsm.builtin`), the same in every namespace.

A **ServiceEntity** is checked alone at apply time (attributes, modifiers, identity, realization
mappings), and against what it refers to where that is known: its lifecycle (its `config` may only
name auto transfers of it) and its Blueprint (the realization's variables). It is Ready when its
lifecycle and Blueprint are found and fit; otherwise Stalled naming what is missing, and checked
again when they appear (`depends_on`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.calm.blueprint import KIND as BLUEPRINT_KIND
from operators.lsm.attributes import entity_problems, service_entity_problems
from operators.lsm.lifecycle import config_problems, lifecycle_problems, semantic_problems, summarize
from operators.lsm.models import SERVICE_INSTANCE, LifecycleSpec, ServiceEntitySpec
from operators.lsm.notify import egress_problems
from operators.lsm.realization import realization_problems
from operators.lsm.versions import at_version, in_use, numbers, version_problems
from operators.lsm.wire import merge_ready
from operators.lsm.world import Unresolved, find_blueprint, find_lifecycle
from operators.runtime import (
    KIND_CONDITIONS,
    AdmissionRequest,
    Objects,
    PermanentError,
    Refusal,
    Services,
    StepContext,
    TemporaryError,
    parse_spec,
    spec_admission,
    spec_step,
)
from pipelines.executors.egress import EgressPolicy

BLUEPRINT_RECHECK_SECONDS = 60.0
"""A slow safety net only: an entity is checked again when its Blueprint becomes Ready."""

# --- Lifecycle ------------------------------------------------------------------------------------


def lifecycle_semantic_problems(spec: Mapping[str, Any]) -> list[str]:
    """`Kind.problems` of a Lifecycle: the checks beyond its schema (which the webhook checked first)."""
    return semantic_problems(parse_spec(LifecycleSpec, spec))


@spec_step(LifecycleSpec)
async def check_lifecycle(ctx: StepContext[LifecycleSpec]) -> Mapping[str, Any]:
    """Init -> Provisioned: the admission checks again (for objects that bypassed the webhook), and the
    model state of each state."""
    problems = lifecycle_problems(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    facts = summarize(ctx.spec)
    facts["modelStates"] = merge_ready(ctx.obj.status.get("modelStates"), facts["modelStates"])
    return facts


# --- ServiceEntity --------------------------------------------------------------------------------


async def check_entity(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated: the entity alone (for objects that bypassed the webhook)."""
    problems = service_entity_problems(ctx.obj.spec)
    if not problems:
        problems = version_problems(parse_spec(ServiceEntitySpec, ctx.obj.spec))
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    return {}


async def context_problems(services: Services, namespace: str, entity: ServiceEntitySpec, *, lenient: bool
                           ) -> list[str]:
    """The entity against its lifecycle and Blueprint, as far as they are found. Raises Unresolved when one
    is missing (the pipeline stalls on it; admission lets it be, the order of a GitOps apply is free)."""
    lifecycle = await find_lifecycle(services, namespace, entity.lifecycle, lenient=lenient)
    problems = config_problems(entity.config, lifecycle)
    realization = entity.realization
    if realization is not None:
        blueprint = BLUEPRINT_KIND.parse(await find_blueprint(services, namespace, realization.blueprint))
        problems += realization_problems(entity, blueprint, realization.blueprint)
    return problems


@spec_step(ServiceEntitySpec)
async def resolve_entity(ctx: StepContext[ServiceEntitySpec]) -> Mapping[str, Any]:
    """Validated -> Provisioned: the lifecycle and the Blueprint are found and fit."""
    entity = ctx.spec
    facts = {"lifecycle": entity.lifecycle.key, "attributeCount": len(entity.attributes),
             "blueprint": entity.realization.blueprint if entity.realization is not None else None,
             "autoTransfersOff": sorted(name for name, on in entity.config.items() if not on) or None,
             "version": entity.current_version, "versions": numbers(entity)}
    try:
        problems = []
        for index, number in [(None, entity.current_version), *enumerate(v.version for v in entity.versions)]:
            view = at_version(entity, number)
            assert view is not None
            found = await context_problems(ctx.services, ctx.obj.namespace, view, lenient=False)
            problems += found if index is None else [f"spec.versions[{index}].{p.removeprefix('spec.')}"
                                                     for p in found]
    except Unresolved as error:
        if error.waiting:
            raise TemporaryError(error.reason, f"{error.message}; the entity is checked again when it is",
                                 delay=BLUEPRINT_RECHECK_SECONDS, facts=facts, waiting=True) from None
        raise PermanentError(error.reason, f"{error.message}; the entity is checked again when it appears",
                             facts=facts) from None
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems), facts=facts)
    if entity.notifications:
        facts[KIND_CONDITIONS] = [await notifying(ctx.services, entity)]
    return facts


NOTIFYING = "Notifying"
"""The entity's condition on its subscriptions: False, reason EgressRefused, when the egress rule refuses one."""


async def notifying(services: Services, entity: ServiceEntitySpec) -> dict[str, str]:
    """The Notifying condition: each subscription's endpoint judged by the egress rule of http tasks now (it is
    judged again at each connection). The entity stays Ready: its instances do not wait on a receiver."""
    runs = services.runs
    policy = EgressPolicy(allow=runs.http_allow, deny=runs.service_cidrs)
    problems = await egress_problems(entity.notifications, policy)
    if problems:
        return {"type": NOTIFYING, "status": "False", "reason": "EgressRefused", "message": "; ".join(problems)}
    return {"type": NOTIFYING, "status": "True", "reason": "Subscribed",
            "message": f"{len(entity.notifications)} subscription(s); deliveries in status.notifications"}


@spec_admission(ServiceEntitySpec)
async def entity_admission(request: AdmissionRequest[ServiceEntitySpec]) -> None:
    """Refuse an entity that does not fit its lifecycle or Blueprint where they are known, and a change of
    its lifecycle or identity while it has instances (they would be left in states or with identities that
    no longer mean anything)."""
    entity = request.parsed
    services = request.services
    if services is None:
        return
    try:
        problems = await context_problems(services, request.namespace, entity, lenient=True)
    except Unresolved:
        problems = []
    if problems:
        raise Refusal("; ".join(problems), 422)
    if request.operation != "UPDATE" or request.old is None:
        return
    old = request.parse(request.old.get("spec") or {})
    removed = sorted(set(numbers(old)) - set(numbers(entity)))
    changed = _changed_in_use(old, entity)
    if not removed and not changed:
        return
    listed = await Objects(services.kube).list(SERVICE_INSTANCE, request.namespace)
    users: dict[int, list[str]] = {}
    for item in listed:
        if (item.get("spec") or {}).get("entity") == request.name:
            name = str((item.get("metadata") or {}).get("name"))
            users.setdefault(in_use(item, old.current_version), []).append(name)
    for number in removed:
        if users.get(number):
            raise Refusal(f"spec.versions: version {number} cannot be removed: instances use it "
                          f"({_names(users[number])}); migrate them first (spec.entityVersion with "
                          "spec.migration)", 409)
    for number, path in changed:
        if users.get(number):
            whose = "the entity has instances" if len(numbers(entity)) == 1 else f"instances use version {number}"
            raise Refusal(f"{path}: cannot change while {whose} ({_names(users[number])})", 409)


def _names(names: list[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:10]) + (f" and {len(ordered) - 10} more" if len(ordered) > 10 else "")


def _changed_in_use(old: ServiceEntitySpec, new: ServiceEntitySpec) -> list[tuple[int, str]]:
    """(version, field) for each version both specs have whose lifecycle or identity differs: its instances would
    be left in states or with identities that no longer mean anything."""
    out: list[tuple[int, str]] = []
    for number in sorted(set(numbers(old)) & set(numbers(new))):
        before, after = at_version(old, number), at_version(new, number)
        assert before is not None and after is not None
        index = next((i for i, v in enumerate(new.versions) if v.version == number), None)
        prefix = "spec." if index is None else f"spec.versions[{index}]."
        out += [(number, prefix + name) for name, a, b in (("lifecycle", before.lifecycle, after.lifecycle),
                                                           ("identity", before.identity, after.identity)) if a != b]
    return out


def entity_semantic_problems(spec: Mapping[str, Any]) -> list[str]:
    """`Kind.problems` of a ServiceEntity: the checks of its spec alone beyond its schema (its other versions'
    too)."""
    entity = parse_spec(ServiceEntitySpec, spec)
    return entity_problems(entity) + version_problems(entity)
