"""Inter-service relations (Inmanta's inter_service_relations), pure: which instances an attribute set names,
whether it names them rightly, whether they are up, and who names an instance.

A relation is an attribute of the entity's instances whose value names other ServiceInstances of one entity
(`entity_type`), in the instance's own namespace: one name (a string) when its upper limit is 1, else a list
of names. Names only (not uids, not `<identity>=<value>`): a name is what `kubectl` and a manifest in git use,
and a name cannot reach another namespace (a `/` is refused, naming the attribute).

Three rules, each with its own place:

- shape (`shape_problems`): arity and names; refused at apply time by the webhook, and a validation problem
  if the webhook was bypassed;
- targets (`target_problems`): each name is an instance of `entity_type`, not being deleted; refused at apply
  time, and a validation problem;
- the gate (`waiting_for`): an instance is deployed (its App launched or updated: a state whose resource-based
  transfer moves it on) only once every instance it names is *up*: in a state that deploys (model state
  active) and settled there, Ready at its generation. In the built-in lifecycles that is `up`. It goes on
  when they are, told by their change (`mentions`: the kind's `depends_on`), not by polling.

And the converse (`referrers`): an instance still named by another (not in a deleted state) cannot be
deleted; the refusal names them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operators.lsm.models import LifecycleSpec, RelationDefinition, ServiceEntitySpec

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def relations(entity: ServiceEntitySpec) -> dict[str, RelationDefinition]:
    return {relation.name: relation for relation in entity.inter_service_relations}


def _names(value: Any) -> list[str]:
    """The names a relation's value holds (what is not a name is left to `shape_problems`)."""
    items = value if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str)]


def referenced(entity: ServiceEntitySpec, values: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The names each relation of an attribute set holds (relations absent or null: none)."""
    if not values:
        return {}
    return {name: _names(values[name]) for name in relations(entity) if values.get(name) is not None}


def references(entity: ServiceEntitySpec, *sets: Mapping[str, Any] | None) -> list[str]:
    """Every instance the sets name, sorted, once each."""
    return sorted({n for values in sets for names in referenced(entity, values).values() for n in names})


def _arity(relation: RelationDefinition) -> str:
    upper = "any number" if relation.upper_limit is None else str(relation.upper_limit)
    return f"{relation.lower_limit}..{upper}"


def shape_problems(entity: ServiceEntitySpec, values: Mapping[str, Any], path: str) -> list[str]:
    """Each relation's value against its arity, and each name against what a name of this namespace is. An
    absent optional relation is fine; a wrong type is `set_problems`' (the relation is an attribute too)."""
    problems: list[str] = []
    for name, relation in relations(entity).items():
        value = values.get(name)
        if value is None:
            continue
        single = relation.upper_limit == 1
        if (single and not isinstance(value, str)) or (not single and not isinstance(value, list)):
            continue  # the type: set_problems says it
        items = [value] if single else list(value)
        if not single and not relation.lower_limit <= len(items) <= (relation.upper_limit or len(items)):
            problems.append(f"{path}.{name}: names {len(items)} instances; relation {name} takes "
                            f"{_arity(relation)} instances of {relation.entity_type}")
        seen: set[str] = set()
        for index, item in enumerate(items):
            where = f"{path}.{name}" if single else f"{path}.{name}[{index}]"
            if not isinstance(item, str):
                problems.append(f"{where}: expected the name of a service instance, got a non-string")
            elif "/" in item:
                problems.append(f"{where}: {item!r} names another namespace: a relation names service instances "
                                "of its own namespace only, by name")
            elif not _NAME.fullmatch(item) or len(item) > 253:
                problems.append(f"{where}: {item!r} is not the name of a service instance (lowercase letters, "
                                "digits, '-' and '.')")
            elif item in seen:
                problems.append(f"{where}: {item} is named twice")
            seen.add(item)
    return problems


@dataclass(frozen=True)
class Target:
    """A named instance as a referrer sees it: its entity, its state, whether it is up or going."""

    entity: str
    state: str | None = None
    up: bool = False
    going: bool = False


def target(body: Mapping[str, Any]) -> Target:
    """A ServiceInstance object as a relation's target. Up: in a state that deploys (model state active),
    settled there (Ready at its generation), not being deleted."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    going = bool(meta.get("deletionTimestamp")) or bool(status.get("deleted"))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    current = status.get("observedGeneration") == meta.get("generation")
    up = not going and status.get("modelState") == "active" and ready and current
    return Target(entity=str((body.get("spec") or {}).get("entity") or ""), state=status.get("state"), up=up,
                  going=going)


def target_problems(entity: ServiceEntitySpec, values: Mapping[str, Any], path: str,
                    found: Mapping[str, Target | None], namespace: str) -> list[str]:
    """Each name against the instance it names (`found`: None for none): it exists, is of the relation's
    entity and is not going."""
    problems: list[str] = []
    for name, names in referenced(entity, values).items():
        relation = relations(entity)[name]
        for item in names:
            there = found.get(item)
            if there is None:
                problems.append(f"{path}.{name}: no service instance {item!r} in namespace {namespace} (relation "
                                f"{name} names instances of {relation.entity_type})")
            elif there.entity != relation.entity_type:
                problems.append(f"{path}.{name}: service instance {item} is of entity {there.entity}, not "
                                f"{relation.entity_type} (relation {name})")
            elif there.going:
                problems.append(f"{path}.{name}: service instance {item} is being deleted")
    return problems


def waiting_for(entity: ServiceEntitySpec, values: Mapping[str, Any], found: Mapping[str, Target | None]) -> list[str]:
    """Why the instance may not be deployed yet: each named instance that is not up, with its state."""
    out: list[str] = []
    for name, names in referenced(entity, values).items():
        for item in names:
            there = found.get(item)
            if there is None or not there.up:
                where = "absent" if there is None else ("being deleted" if there.going else
                                                         f"state {there.state or 'none'}, not up")
                out.append(f"{name}: {item} ({where})")
    return out


def awaits_deployment(lifecycle: LifecycleSpec, state: str) -> bool:
    """Whether an instance in `state` waits for its deployment to move on (a resource-based transfer to another
    state: creating, update_inprogress, rollback), where the gate holds; not a repair of `up` (up -> up)."""
    return any(t.resource_based and t.source == state and t.target != state for t in lifecycle.transfers)


def mentions(spec: Mapping[str, Any], name: str) -> bool:
    """Whether an instance's spec may name `name` in a relation: any attribute holding it (the entity is not at
    hand here; a mention that is no relation costs a recheck, nothing more). The kind's `depends_on`."""
    for value in (spec.get("attributes") or {}).values():
        if value == name or (isinstance(value, list) and name in value):
            return True
    return False


def referrers(name: str, instances: Iterable[Mapping[str, Any]],
              entities: Mapping[str, ServiceEntitySpec]) -> list[tuple[str, str]]:
    """(referrer, relation) for each instance that names `name` in a relation of any of its attribute sets
    (the client's, candidate, active), but those in a deleted state; sorted."""
    out: set[tuple[str, str]] = set()
    for item in instances:
        meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
        entity = entities.get(str(spec.get("entity")))
        if entity is None or not entity.inter_service_relations or status.get("deleted") or meta.get("name") == name:
            continue
        for values in (spec.get("attributes"), status.get("candidateAttributes"), status.get("activeAttributes")):
            for relation, names in referenced(entity, values).items():
                if name in names:
                    out.add((str(meta.get("name")), relation))
    return sorted(out)


def referrers_text(found: list[tuple[str, str]]) -> str:
    """`link-1 (sites), link-2 (sites)`."""
    by: dict[str, list[str]] = {}
    for referrer, relation in found:
        by.setdefault(referrer, []).append(relation)
    return ", ".join(f"{referrer} ({', '.join(names)})" for referrer, names in by.items())


def entity_relation_problems(entity: ServiceEntitySpec) -> list[str]:
    """A ServiceEntity's relations: limits that fit, names no attribute has."""
    problems: list[str] = []
    attributes = {a.name for a in entity.attributes}
    for index, relation in enumerate(entity.inter_service_relations):
        path = f"spec.interServiceRelations[{index}]"
        if relation.name in attributes:
            problems.append(f"{path}.name: {relation.name} is also an attribute: a relation is an attribute of its "
                            "own")
        if relation.upper_limit is not None and relation.lower_limit > relation.upper_limit:
            problems.append(f"{path}.lowerLimit: {relation.lower_limit} is above upperLimit {relation.upper_limit}")
    return problems
