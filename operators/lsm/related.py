"""What relations need of the cluster: the instances an attribute set names, and the instances that name one.

Read from the API server (a GET per named instance; a LIST of the namespace's instances for referrers, and of
its entities only when some instance mentions the name), so that the webhook, the inventory API and the
pipeline judge alike and never on a stale store. The rules are `operators.lsm.relations`; this module refuses
(`Refused`) or reports with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from operators.lsm.machine import Refused, Validator
from operators.lsm.models import SERVICE_ENTITY, SERVICE_INSTANCE, ServiceEntitySpec, ServiceInstanceStatus
from operators.lsm.relations import (
    Target,
    awaits_deployment,
    mentions,
    references,
    referrers,
    referrers_text,
    shape_problems,
    target,
    target_problems,
    waiting_for,
)
from operators.lsm.world import Sources, World
from operators.runtime import Objects, object_name_ok


async def find_targets(services: Sources, namespace: str, names: Iterable[str]) -> dict[str, Target | None]:
    """Each named instance of the namespace as a target (None: there is none)."""
    objects = Objects(services.kube)
    found: dict[str, Target | None] = {}
    for name in sorted(set(names)):
        body = await objects.find(SERVICE_INSTANCE, namespace, name) if object_name_ok(name) else None
        found[name] = None if body is None else target(body)
    return found


async def check_relations(world: World, values: Mapping[str, Any], path: str = "spec.attributes") -> None:
    """Refuse (422) an attribute set whose relations break their arity, reach out of the namespace, or name
    instances that are absent, of another entity or being deleted: the webhook's and the API's check."""
    if not world.entity.inter_service_relations:
        return
    problems = shape_problems(world.entity, values, path)
    if not problems:
        found = await find_targets(world.services, world.namespace, references(world.entity, values))
        problems = target_problems(world.entity, values, path, found, world.namespace)
    if problems:
        raise Refused("; ".join(problems), 422, "InvalidRelation")


async def with_relation_check(world: World, *sets: Mapping[str, Any] | None) -> World:
    """The world whose validation also checks the relations' targets (those the sets name, read once now), for
    the pipeline: an instance whose webhook was bypassed is rejected by its lifecycle, naming the attribute."""
    if not world.entity.inter_service_relations:
        return world
    found = await find_targets(world.services, world.namespace, references(world.entity, *sets))
    entity, namespace, rules = world.entity, world.namespace, world.check

    def check(values: Mapping[str, Any], path: str) -> list[str]:
        problems = target_problems(entity, values, path, found, namespace)
        return problems or (rules(values, path) if rules is not None else [])

    validator: Validator = check
    world.check = validator
    return world


async def not_up(world: World, status: ServiceInstanceStatus) -> list[str]:
    """Why the instance's deployment must wait: the instances its active set names that are not up (none when
    its state does not wait for a deployment, or it has no relations)."""
    if not world.entity.inter_service_relations or status.state is None:
        return []
    if not awaits_deployment(world.lifecycle, status.state):
        return []
    values = status.active_attributes or {}
    found = await find_targets(world.services, world.namespace, references(world.entity, values))
    return waiting_for(world.entity, values, found)


async def referrers_of(services: Sources, namespace: str, name: str) -> list[tuple[str, str]]:
    """(referrer, relation) for each instance of the namespace that names `name` in a relation."""
    objects = Objects(services.kube)
    instances = await objects.list(SERVICE_INSTANCE, namespace)
    mentioning = [i for i in instances if mentions(i.get("spec") or {}, name)
                  or mentions({"attributes": (i.get("status") or {}).get("activeAttributes")}, name)
                  or mentions({"attributes": (i.get("status") or {}).get("candidateAttributes")}, name)]
    if not mentioning:
        return []
    entities: dict[str, ServiceEntitySpec] = {}
    for body in await objects.list(SERVICE_ENTITY, namespace):
        try:
            entities[str((body.get("metadata") or {}).get("name"))] = ServiceEntitySpec.model_validate(
                dict(body.get("spec") or {}))
        except ValidationError:
            continue
    return referrers(name, mentioning, entities)


async def refuse_if_referenced(services: Sources, namespace: str, name: str) -> None:
    """Refuse (409) the delete of an instance another instance still names, naming them."""
    found = await referrers_of(services, namespace, name)
    if found:
        raise Refused(f"service instance {name} is still referenced by {referrers_text(found)}: delete those "
                      "instances, or change their relations, first", 409, "StillReferenced")


async def relation_graph(services: Sources, namespace: str
                         ) -> tuple[list[dict[str, Any]], dict[str, ServiceEntitySpec]]:
    """The namespace's instances and the entities that have relations (valid specs only): what `referrers`
    reads to say who names whom, listed once for a whole answer of the inventory API."""
    objects = Objects(services.kube)
    entities: dict[str, ServiceEntitySpec] = {}
    for body in await objects.list(SERVICE_ENTITY, namespace):
        try:
            entity = ServiceEntitySpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError:
            continue
        if entity.inter_service_relations:
            entities[str((body.get("metadata") or {}).get("name"))] = entity
    if not entities:
        return [], {}
    return await objects.list(SERVICE_INSTANCE, namespace), entities
