"""What the lifecycle of an instance needs of the cluster: its ServiceEntity, its Lifecycle, the rules of
its Blueprint, and the identities of the entity's other instances.

They are read through a kind's `services` (the local store first: Provisioned objects, no API call;
the API server when the store has no answer, to say why), so that the pipeline, the admission
webhook and the inventory HTTP API resolve them alike. `World.advance` runs the pure engine
(`operators.lsm.machine.advance`) with them; the other instances are listed only when the engine
asks for them (a creation or a validation of an entity with an identity).

Two strictnesses:

- the pipeline is strict: the entity must be Ready (Provisioned: its lifecycle and Blueprint were
  found and fit), so that an instance never moves on a lifecycle or rules nobody checked;
- admission and deletion are lenient: they take the entity and lifecycle as the API server has
  them when they are valid, and leave the decision to the pipeline when they cannot be resolved
  (an instance applied together with its entity, or deleted after it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import ValidationError

from operators.calm.app import blueprint_reason
from operators.calm.models import BLUEPRINT, BlueprintSpec
from operators.lsm.attributes import entity_problems, identity_value
from operators.lsm.builtin import BUILTINS, object_name
from operators.lsm.identities import index_of
from operators.lsm.lifecycle import lifecycle_problems
from operators.lsm.machine import Context, Outcome, Trigger, Validator, advance
from operators.lsm.models import (
    CLUSTER_LIFECYCLE,
    LIFECYCLE,
    SERVICE_ENTITY,
    SERVICE_INSTANCE,
    LifecycleRef,
    LifecycleSpec,
    ServiceEntitySpec,
    ServiceInstanceStatus,
)
from operators.lsm.realization import blueprint_rules
from operators.lsm.versions import at_version, no_version
from operators.runtime import Objects, Requester, Resource, StoredRecord, object_key, parse_spec, utc_now
from operators.runtime import conditions as cond

BUILTIN_NAMES = ", ".join(BUILTINS)


class Unresolved(Exception):
    """Something an instance or an entity refers to is missing or not Ready: `reason` is a CamelCase word
    for conditions, `message` says what and what exists instead; `waiting` when it is on its way (a
    Blueprint still compiling) rather than absent or broken."""

    def __init__(self, reason: str, message: str, waiting: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.waiting = waiting


class StoredReader(Protocol):
    """The local store, as far as resolving reads it (the API's resolver has none: it answers nothing)."""

    def get(self, key: str) -> StoredRecord | None: ...

    def items(self, kind: str) -> Iterable[tuple[str, StoredRecord]]: ...


class Sources(Protocol):
    """Where a lifecycle, an entity or a Blueprint is found: the process's `Services` in steps and admission,
    the API server alone in the API."""

    @property
    def kube(self) -> Requester: ...

    @property
    def store(self) -> StoredReader: ...


def _stored_names(services: Sources, kind: str, namespace: str) -> str:
    prefix = object_key(kind, namespace, "")
    names = sorted(key.removeprefix(prefix) for key, _ in services.store.items(kind) if key.startswith(prefix))
    return ", ".join(names) or "none"


def _why_not_ready(status: Mapping[str, Any]) -> str:
    return blueprint_reason(status) or "not reconciled yet"


def ready(body: Mapping[str, Any]) -> bool:
    """Whether an object says it is Ready at its generation: what the store would hold once its event is
    seen (after a restart with a lost store, the objects of one kind may come before those of another)."""
    status = body.get("status") or {}
    return (cond.is_true(status.get("conditions") or [], cond.READY)
            and status.get("observedGeneration") == (body.get("metadata") or {}).get("generation"))


# --- lifecycles, entities, blueprints --------------------------------------------------------------


async def find_lifecycle(services: Sources, namespace: str, ref: LifecycleRef, *, lenient: bool = False
                         ) -> LifecycleSpec:
    """The lifecycle a reference names: a built-in one (its ClusterLifecycle when installed, else the code's copy),
    a ClusterLifecycle, or a Lifecycle of the namespace; Ready ones (any valid one when `lenient`).
    Raises Unresolved."""
    if ref.builtin is not None:
        record = services.store.get(object_key(CLUSTER_LIFECYCLE.kind, "", object_name(ref.builtin)))
        if record is not None:
            return parse_spec(LifecycleSpec, record.spec)
        return BUILTINS[ref.builtin]
    if ref.cluster is not None:
        return await _find(services, CLUSTER_LIFECYCLE.kind, CLUSTER_LIFECYCLE.plural, "", str(ref.cluster),
                           lenient=lenient)
    return await _find(services, LIFECYCLE.kind, LIFECYCLE.plural, namespace, str(ref.name), lenient=lenient)


async def _find(services: Sources, kind: str, plural: str, namespace: str, name: str, *, lenient: bool
                ) -> LifecycleSpec:
    record = services.store.get(object_key(kind, namespace, name))
    if record is not None:
        return parse_spec(LifecycleSpec, record.spec)
    body = await Objects(services.kube).find(Resource(kind, plural), namespace, name)
    if body is None:
        if not namespace:
            raise Unresolved("LifecycleNotFound", f"spec.lifecycle.cluster: no ClusterLifecycle {name!r} "
                             f"(ClusterLifecycles: {_stored_names(services, kind, '')}; built-in, as "
                             f"lifecycle.builtin: {BUILTIN_NAMES})")
        raise Unresolved("LifecycleNotFound", f"spec.lifecycle.name: no Lifecycle {name!r} in namespace {namespace} "
                         f"(Lifecycles here: {_stored_names(services, kind, namespace)}; built-in, as "
                         f"lifecycle.builtin: {BUILTIN_NAMES})")
    spec = body.get("spec") or {}
    if ready(body) or (lenient and not lifecycle_problems(spec)):
        return parse_spec(LifecycleSpec, spec)
    raise Unresolved("LifecycleNotReady", f"{kind} {name} is not Ready: {_why_not_ready(body.get('status') or {})}")


async def find_blueprint(services: Sources, namespace: str, name: str) -> Mapping[str, Any]:
    """The spec of an Active Blueprint of the namespace. Raises Unresolved (waiting while it compiles)."""
    record = services.store.get(object_key(BLUEPRINT.kind, namespace, name))
    if record is not None and record.status.get("state") == "Active":
        return dict(record.spec)
    body = await Objects(services.kube).find(BLUEPRINT, namespace, name)
    if body is None:
        raise Unresolved("BlueprintNotFound", f"spec.realization.blueprint: no Blueprint {name!r} in namespace "
                         f"{namespace} (Blueprints here: {_stored_names(services, BLUEPRINT.kind, namespace)})")
    status = body.get("status") or {}
    if ready(body) and status.get("state") == "Active":
        return dict(body.get("spec") or {})
    stalled = cond.is_true(status.get("conditions") or [], cond.STALLED)
    raise Unresolved("BlueprintNotActive", f"Blueprint {name} is not Active (state: {status.get('state') or 'none'}"
                     f": {_why_not_ready(status)})", waiting=not stalled)


def lazy_rules(entity: ServiceEntitySpec, blueprint: Mapping[str, Any]) -> Validator:
    """The Blueprint's variable rules as a validation, its spec parsed only if a validation runs."""
    parsed: list[Validator] = []

    def check(values: Mapping[str, Any], path: str) -> list[str]:
        if not parsed:
            parsed.append(blueprint_rules(entity, parse_spec(BlueprintSpec, blueprint)))
        return parsed[0](values, path)

    return check


async def find_entity(services: Sources, namespace: str, name: str, *, lenient: bool = False) -> ServiceEntitySpec:
    """A ServiceEntity of the namespace: Ready (Provisioned), or any valid one when `lenient`. Raises Unresolved."""
    record = services.store.get(object_key(SERVICE_ENTITY.kind, namespace, name))
    if record is not None:
        return parse_spec(ServiceEntitySpec, record.spec)
    body = await Objects(services.kube).find(SERVICE_ENTITY, namespace, name)
    if body is None:
        raise Unresolved("EntityNotFound", f"spec.entity: no ServiceEntity {name!r} in namespace {namespace} "
                         f"(ServiceEntities here: {_stored_names(services, SERVICE_ENTITY.kind, namespace)}); the "
                         "instance goes on when it appears")
    if ready(body):
        return parse_spec(ServiceEntitySpec, body.get("spec") or {})
    if lenient:
        try:
            entity = parse_spec(ServiceEntitySpec, body.get("spec") or {})
        except ValidationError:
            entity = None
        if entity is not None and not entity_problems(entity):
            return entity
    why = _why_not_ready(body.get("status") or {})
    raise Unresolved("EntityNotReady", f"ServiceEntity {name} is not Ready: {why}; the instance goes on when it is")


# --- the world of one instance --------------------------------------------------------------------


class _Probe(Mapping[str, str]):
    """An empty `others` that notes whether the engine looked at it."""

    touched = False

    def __getitem__(self, key: str) -> str:
        self.touched = True
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        self.touched = True
        return iter(())

    def __len__(self) -> int:
        self.touched = True
        return 0


@dataclass
class World:
    """An instance's entity, lifecycle and rules, and how to list the entity's other instances."""

    services: Sources
    namespace: str
    instance: str
    entity_name: str
    entity: ServiceEntitySpec
    lifecycle: LifecycleSpec
    check: Validator | None = None
    tie_break: bool = False
    """Count only the instances created before this one (the pipeline): of two instances created at once
    with the same identity, the older keeps it. Admission counts every other instance."""
    others: Mapping[str, str] | None = field(default=None, repr=False)
    entity_version: int = 1
    """The entity version `entity` is (`operators.lsm.versions`): the one the instance uses."""

    def context(self, others: Mapping[str, str] | None = None) -> Context:
        return Context(instance=self.instance, entity_name=self.entity_name, entity=self.entity,
                       lifecycle=self.lifecycle, now=utc_now(), others=others if others is not None else {},
                       check=self.check)

    async def advance(self, status: ServiceInstanceStatus, trigger: Trigger) -> Outcome:
        """The engine's next status; the other instances are listed (once) only if the engine needs them."""
        if self.others is not None or self.entity.identity is None:
            return advance(self.context(self.others), status, trigger)
        probe = _Probe()
        try:
            outcome = advance(replace(self.context(), others=probe), status, trigger)
        except Exception:
            if not probe.touched:
                raise
        else:
            if not probe.touched:
                return outcome
        self.others = await self.list_others()
        return advance(self.context(self.others), status, trigger)

    async def list_others(self) -> Mapping[str, str]:
        """The identity values of the entity's other instances that are not deleted, each with its instance: from
        the operator's index of them when it has one in sync (`operators.lsm.identities`: no API call), else
        from a LIST of the namespace's instances."""
        index = index_of(self.services)
        if index is not None and index.in_sync and self.entity.identity is not None:
            return index.others(self.namespace, self.entity_name, self.entity.identity, self.instance,
                                tie_break=self.tie_break)
        listed = await Objects(self.services.kube).list(SERVICE_INSTANCE, self.namespace)
        items = [i for i in listed if (i.get("spec") or {}).get("entity") == self.entity_name]
        me = next((i for i in items if (i.get("metadata") or {}).get("name") == self.instance), None)
        mine = ((me or {}).get("metadata") or {}).get("creationTimestamp")
        out: dict[str, str] = {}
        for item in sorted(items, key=_age):
            meta, status = item.get("metadata") or {}, item.get("status") or {}
            name = str(meta.get("name"))
            if name == self.instance or status.get("deleted"):
                continue
            if self.tie_break and mine is not None and _age(item) >= (str(mine), self.instance):
                continue
            value = status.get("identity") or identity_value(self.entity, (item.get("spec") or {}).get("attributes"))
            if value is not None:
                out.setdefault(str(value), name)
        return out


def _age(item: Mapping[str, Any]) -> tuple[str, str]:
    meta = item.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


async def resolve(services: Sources, namespace: str, instance: str, entity_name: str, *, lenient: bool = False,
                  version: int | None = None) -> World:
    """The world of an instance of `entity_name` at entity version `version` (None: the current one). Raises
    Unresolved."""
    whole = await find_entity(services, namespace, entity_name, lenient=lenient)
    number = version if version is not None else whole.current_version
    entity = at_version(whole, number)
    if entity is None:
        raise Unresolved("EntityVersionNotFound", no_version(whole, entity_name, number))
    lifecycle = await find_lifecycle(services, namespace, entity.lifecycle, lenient=lenient)
    check = None
    if entity.realization is not None:
        try:
            check = lazy_rules(entity, await find_blueprint(services, namespace, entity.realization.blueprint))
        except Unresolved:
            if not lenient:
                raise
    return World(services, namespace, instance, entity_name, entity, lifecycle, check, tie_break=not lenient,
                 entity_version=number)
