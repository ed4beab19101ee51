"""What macros are resolved against: the entities, their properties, the credentials."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

from operators.calm.macros.lexer import NAME_PATTERN

EntityKind: TypeAlias = Literal["Application", "Substrate", "Deployment", "Package", "Service"]
ENTITY_KINDS: Final[tuple[EntityKind, ...]] = ("Application", "Substrate", "Deployment", "Package", "Service")
"""Calm's macro context, outermost first: all objects inherit the properties of those above."""

MacroValue: TypeAlias = str | int | Sequence[str | int]
"""A value a macro can read: text, a number, or one value per replica (a sequence, rendered as a
comma-separated list and indexable with ``[i]``)."""

EvaluatedValue: TypeAlias = str | int | tuple[str | int, ...]


@dataclass(frozen=True)
class Secret:
    """A secret value, known before the run only by its vault reference (never by its value)."""

    reference: str


AttributeValue: TypeAlias = MacroValue | Secret | None
"""An entity attribute: its value if known before the run, a `Secret`, or None when it exists but
gets its value only at run time (an address, a variable a task sets)."""


@dataclass(frozen=True)
class Entity:
    """One object of the macro context and what it knows.

    `parent` is the name of the entity one step up the chain (a service's package, a package's
    deployment, a deployment's substrate); an entity without one hangs under the Application.
    A parent may be of any kind above (a service directly under its deployment, say)."""

    kind: EntityKind
    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    parent: str | None = None


@dataclass(frozen=True)
class Credential:
    """A credential as macros see it: the user name, and the secret only as a vault reference."""

    name: str
    username: str
    secret: Secret


@dataclass(frozen=True)
class BuiltinValues:
    """The values of the built-ins that depend on the app; None while not known (before launch, say)."""

    blueprint_name: str | None = None
    blueprint_uuid: str | None = None
    application_name: str | None = None
    application_uuid: str | None = None
    project_name: str | None = None
    array_index: int | None = None


@dataclass(frozen=True)
class MacroContext:
    """What exists for the macros of one task: the entities, the one the task runs on (`current`),
    the credentials and the built-in values.

    Build one per blueprint or app and derive the per-task ones with `at`. Construction checks
    the structure and raises ValueError: duplicate names, names that are not identifiers or shadow
    a kind, unknown parents, a parent below its child in the chain, more than one Application."""

    entities: tuple[Entity, ...] = ()
    current: str | None = None
    credentials: tuple[Credential, ...] = ()
    builtins: BuiltinValues = field(default_factory=BuiltinValues)
    _entities: Mapping[str, Entity] = field(init=False, repr=False, compare=False)
    _credentials: Mapping[str, Credential] = field(init=False, repr=False, compare=False)
    _application: Entity | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        entities = tuple(self.entities)
        credentials = tuple(self.credentials)
        object.__setattr__(self, "entities", entities)
        object.__setattr__(self, "credentials", credentials)
        applications = [entity for entity in entities if entity.kind == "Application"]
        if len(applications) > 1:
            raise ValueError("a macro context has at most one Application")
        by_name: dict[str, Entity] = {}
        for entity in entities:
            if entity.kind not in ENTITY_KINDS:
                raise ValueError(f"unknown entity kind {entity.kind!r}")
            # The Application is reached as `Application`: its name (a Kubernetes name) may be anything.
            if entity.kind != "Application":
                _check_object_name(entity.name, f"{entity.kind} name")
            if entity.name in by_name:
                raise ValueError(f"duplicate name {entity.name!r}: names are unique across entities and credentials")
            by_name[entity.name] = entity
        by_credential: dict[str, Credential] = {}
        for credential in credentials:
            _check_object_name(credential.name, "credential name")
            if credential.name in by_name or credential.name in by_credential:
                raise ValueError(
                    f"duplicate name {credential.name!r}: names are unique across entities and credentials"
                )
            by_credential[credential.name] = credential
        for entity in entities:
            if entity.parent is None:
                continue
            if entity.kind == "Application":
                raise ValueError("the Application has no parent")
            parent = by_name.get(entity.parent)
            if parent is None:
                raise ValueError(f"{entity.kind} {entity.name}: unknown parent {entity.parent!r}")
            if ENTITY_KINDS.index(parent.kind) >= ENTITY_KINDS.index(entity.kind):
                raise ValueError(
                    f"{entity.kind} {entity.name}: its parent must be above it in Application → Substrate → "
                    f"Deployment → Package → Service, not a {parent.kind}"
                )
        if self.current is not None and self.current not in by_name:
            raise ValueError(f"unknown current entity {self.current!r}")
        object.__setattr__(self, "_entities", MappingProxyType(by_name))
        object.__setattr__(self, "_credentials", MappingProxyType(by_credential))
        object.__setattr__(self, "_application", applications[0] if applications else None)

    def at(self, current: str | None) -> MacroContext:
        """The same context for a task that runs on `current` (an entity name; None: the application).

        Cheap (no new validation, the indexes are shared): a compiler calls it once per task."""
        if current is not None and current not in self._entities:
            raise ValueError(f"unknown current entity {current!r}")
        moved = copy.copy(self)
        object.__setattr__(moved, "current", current)
        return moved

    @property
    def application(self) -> Entity | None:
        return self._application

    def entity(self, name: str) -> Entity | None:
        return self._entities.get(name)

    def credential(self, name: str) -> Credential | None:
        return self._credentials.get(name)

    def lineage(self, entity: Entity) -> tuple[Entity, ...]:
        """The entity, then each one around it up to the Application: where its properties come from."""
        chain = [entity]
        while True:
            here = chain[-1]
            if here.kind == "Application":
                break
            parent = self._entities[here.parent] if here.parent is not None else self._application
            if parent is None:
                break
            chain.append(parent)
        return tuple(chain)

    def current_lineage(self) -> tuple[Entity, ...]:
        """The chain an unqualified name is looked up in, innermost first."""
        if self.current is not None:
            return self.lineage(self._entities[self.current])
        return (self._application,) if self._application is not None else ()

    def describe_current(self) -> str:
        """The entity the task runs on, for messages."""
        if self.current is None:
            return "the application"
        entity = self._entities[self.current]
        return f"{entity.kind} {entity.name}"


def _check_object_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{what} {name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*): macros could not name it")
    if name in ENTITY_KINDS:
        raise ValueError(f"{what} {name!r} is a kind: @@{{{name}.x}}@@ means the {name} around the task")


def namespace(kind: EntityKind, name: str) -> str:
    """Calm's namespace of an object's properties on a shared machine: ``Deployment_d1_``."""
    return f"{kind}_{name}_"


def namespaced_name(kind: EntityKind, name: str, attribute: str) -> str:
    """The namespaced name of one property: ``Deployment_d1_prop``."""
    return namespace(kind, name) + attribute
