"""Entity versions (issue 31, item 5): a ServiceEntity holds several versions, each whole (attributes,
identity, lifecycle, config, realization); an instance uses one, and a migration moves it to another.

The shape follows a CRD's `versions`, kept small so that every entity written before stays valid as it
is: the spec's top-level fields are the **current** version (number `spec.version`, 1 when absent), the
one new instances use; `spec.versions` lists the **other** versions, older ones instances still use (or
a newer one staged). An entity without `versions` is one version, number 1. Releasing a new version is
therefore: copy the top-level fields into `versions` under their number, then change the top-level
fields and raise `spec.version`; the instances stay on the version they use until migrated.

An instance records the version it uses in `status.entityVersion`: `spec.entityVersion` when it was
created with one, else the entity's current version then; it never moves silently when the entity's
current version changes. A **migration** is declarative (GitOps: it lives in the instance's manifest):
`spec.entityVersion` set to another version, with `spec.migration` naming the state the instance lands
in, values for what the new version needs and the attributes it no longer has. It validates every
attribute set of the instance under the new version (its defaults filled in) and is refused, naming
each failing attribute, when one does not pass; else it is one transfer (trigger `migrate`) to the
target state, from where the new version's lifecycle goes on (its auto transfers, its App).

This module is pure: the per-version view of an entity (`at_version`), its checks, and the migration
itself. The kinds' steps and webhooks (`operators.lsm.instance`, `operators.lsm.entity`) and the
inventory API call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.lsm.attributes import client_problems, entity_problems, set_problems, with_defaults
from operators.lsm.machine import LOG_LIMIT, Context, Outcome, Refused, check_version, describe
from operators.lsm.models import (
    AttributeSet,
    EntityShape,
    LogEntry,
    Migration,
    ServiceEntitySpec,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
)

MIGRATION_SETS: tuple[AttributeSet, ...] = ("candidate", "active", "rollback")
_SHAPE_FIELDS = tuple(EntityShape.model_fields)


def numbers(entity: ServiceEntitySpec) -> list[int]:
    """Every version the entity has, the current one included, in order."""
    return sorted({entity.current_version, *(v.version for v in entity.versions)})


def shown(entity: ServiceEntitySpec) -> str:
    return ", ".join(map(str, numbers(entity)))


def at_version(entity: ServiceEntitySpec, number: int) -> ServiceEntitySpec | None:
    """The entity as version `number` says it (a spec with that version's fields on top and no other
    versions), for everything that reads one version; None when the entity has no such version."""
    if number == entity.current_version:
        return entity if not entity.versions else entity.model_copy(update={"versions": []})
    other = next((v for v in entity.versions if v.version == number), None)
    if other is None:
        return None
    return ServiceEntitySpec.model_construct(**{name: getattr(other, name) for name in _SHAPE_FIELDS},
                                             version=number, versions=[])


def no_version(entity: ServiceEntitySpec, entity_name: str, number: int, path: str = "spec.entityVersion") -> str:
    """Why an instance cannot use version `number`: the message names the field and the versions there are."""
    return f"{path}: service entity {entity_name} has no version {number} (versions: {shown(entity)})"


def version_problems(entity: ServiceEntitySpec) -> list[str]:
    """The problems of an entity's other versions, each naming its field (`spec.versions[1].attributes...`):
    a number that is the current one, and each version's own checks (as the top-level fields get them)."""
    problems: list[str] = []
    for index, other in enumerate(entity.versions):
        prefix = f"spec.versions[{index}]."
        if other.version == entity.current_version:
            problems.append(f"{prefix}version: {other.version} is the current version (spec.version, 1 when absent); "
                            "the top-level fields are that version")
            continue
        view = at_version(entity, other.version)
        assert view is not None
        problems += [prefix + p.removeprefix("spec.") for p in entity_problems(view)]
    return problems


def in_use(instance: Mapping[str, Any], default: int) -> int:
    """The version an instance object uses, as its status records it (`default`, the entity's current
    version, for one not taken in yet or created before entity versions)."""
    status = instance.get("status") or {}
    spec = instance.get("spec") or {}
    for value in (status.get("entityVersion"), spec.get("entityVersion") if not status.get("state") else None):
        if isinstance(value, int):
            return value
    return default


def instance_version(spec: ServiceInstanceSpec, status: ServiceInstanceStatus) -> int | None:
    """The version the instance uses now (None: the entity's current one): the one its status records, or
    for an instance not created yet the one its spec names."""
    if status.entity_version is not None:
        return status.entity_version
    return spec.entity_version if status.state is None else None


def migration_pending(spec: ServiceInstanceSpec, status: ServiceInstanceStatus, in_force: int) -> bool:
    """Whether the spec asks for another version than the one in force for a created instance."""
    return status.state is not None and spec.entity_version is not None and spec.entity_version != in_force


def migrate(target: Context, status: ServiceInstanceStatus, from_version: int, to_version: int,
            migration: Migration | None) -> Outcome:
    """The instance moved to entity version `to_version` (`target` is that version's context): its attribute
    sets validated under it, then one transfer to the migration's target state. Raises `Refused` (422 naming
    the failing attributes or field; 409 for a stale version or a deleted instance); nothing changes then."""
    name = target.instance
    if migration is None:
        raise Refused(f"spec.migration: required to move service instance {name} from entity version {from_version} "
                      f"to {to_version} (spec.entityVersion): name its targetState", 422, "MigrationMissing")
    if status.state is None:
        raise Refused(f"service instance {name} has not been created yet: it is created on the version its "
                      "spec.entityVersion names", 409, "NotCreated")
    check_version(target, status, migration.current_version)
    states = {s.name: s for s in target.lifecycle.states}
    landing = states.get(migration.target_state)
    if landing is None or landing.deleted:
        why = "a deleted state" if landing is not None else "not a state of its lifecycle"
        raise Refused(f"spec.migration.targetState: {migration.target_state!r} is {why} in entity version "
                      f"{to_version} (states: {', '.join(s.name for s in target.lifecycle.states if not s.deleted)})",
                      422, "UnknownState")
    given = {k: v for k, v in migration.attributes.items() if v is not None}
    refusals = client_problems(target.entity, target.entity_name, given, "spec.migration.attributes")
    if refusals:
        raise Refused("; ".join(message for _, message in refusals), 422, refusals[0][0])
    sets: dict[AttributeSet, dict[str, Any] | None] = {}
    problems: list[str] = []
    for which in MIGRATION_SETS:
        values = getattr(status, f"{which}_attributes")
        if values is None:
            sets[which] = None
            continue
        moved = with_defaults(target.entity, {k: v for k, v in {**values, **given}.items()
                                              if v is not None and k not in migration.remove})
        path = f"status.{which}Attributes"
        found = set_problems(target.entity, target.entity_name, moved, path)
        if not found and target.check is not None:
            found = target.check(moved, path)
        problems += found
        sets[which] = moved
    if problems:
        raise Refused(f"service instance {name} cannot move to entity version {to_version}: " + "; ".join(problems)
                      + " (give values in spec.migration.attributes, take attributes out with spec.migration.remove)",
                      422,
                      "MigrationInvalid")
    version = (status.version or 0) + 1
    note = f"entity version {from_version} -> {to_version}" + (f": {migration.message}" if migration.message else "")
    entry = LogEntry(from_=status.state, to=landing.name, trigger="migrate", version=version, time=target.now,
                     message=note)
    after = describe(target, status.model_copy(update={
        "state": landing.name, "version": version, "entity_version": to_version,
        "candidate_attributes": sets["candidate"], "active_attributes": sets["active"],
        "rollback_attributes": sets["rollback"], "validation_problems": None, "refused": None,
        "log": [*status.log, entry][-LOG_LIMIT:],
    }))
    return Outcome(after, (entry,), True)
