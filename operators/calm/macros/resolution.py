"""Resolution: which entity, property or credential each reference names, checked before a run."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from operators.calm.macros.builtins import within_window
from operators.calm.macros.context import ENTITY_KINDS, Credential, Entity, MacroContext, MacroValue, namespaced_name
from operators.calm.macros.lexer import MacroError
from operators.calm.macros.parser import as_template, did_you_mean
from operators.calm.macros.tree import (
    BinaryOp,
    Call,
    CredentialField,
    CredRef,
    Index,
    Macro,
    Node,
    Ref,
    StringLiteral,
    Template,
    walk,
)

RuntimeNames: TypeAlias = Collection[tuple[str | None, str]]
"""(entity name, attribute) pairs some task of the action sets at run time; (None, name) for an
unqualified run variable that belongs to no entity."""

RuntimeValues: TypeAlias = Mapping[tuple[str | None, str], MacroValue] | Mapping[tuple[str, str], MacroValue]
"""The values produced so far at run time, keyed like `RuntimeNames`. (Two spellings because a
Mapping is invariant in its key: a caller's dict keyed by entity names only is welcome too.)"""


@dataclass(frozen=True)
class Resolution:
    """What a reference names: an entity's attribute (`entity` set), a credential field
    (`credential` set), or a run variable (neither: set at run time, owned by no entity).

    `runtime` says whether a task of the action sets it (Calm's rule: then it is kept for the
    run). For the compiler, (`owner`, `attribute`) is what to match against the setters."""

    attribute: str
    entity: Entity | None = None
    credential: Credential | None = None
    runtime: bool = False

    @property
    def owner(self) -> str | None:
        if self.entity is not None:
            return self.entity.name
        return self.credential.name if self.credential is not None else None

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.owner, self.attribute)

    def canonical(self, position: int) -> Ref:
        """How `partial_render` writes this reference: exact whatever entity the task runs on."""
        if self.credential is not None:
            return Ref(self.credential.name, self.attribute, position)
        if self.entity is None:
            return Ref(None, self.attribute, position)
        if self.entity.kind == "Application":
            return Ref("Application", self.attribute, position)
        return Ref(None, namespaced_name(self.entity.kind, self.entity.name, self.attribute), position)


def resolve(
    ref: Ref | CredRef,
    context: MacroContext,
    runtime_names: RuntimeNames = frozenset(),
) -> Resolution:
    """What a reference names in the context; MacroError (at the reference) when it names nothing."""
    return Resolver(context, runtime_names).resolve(ref, None)


class Resolver:
    """What a reference names in a context (or that it waits for run time): shared by the checks and the
    renderers, which keep one per template."""

    def __init__(self, context: MacroContext, runtime_names: RuntimeNames) -> None:
        self.context = context
        self.runtime_names = runtime_names

    def resolve(self, ref: Ref | CredRef, macro: str | None) -> Resolution:
        if isinstance(ref, CredRef):
            return self._credential(ref.credential, ref.field, ref.position, macro)
        if ref.object is None:
            return self._unqualified(ref, macro)
        if ref.object in ENTITY_KINDS:
            return self._in_kind(ref, macro)
        entity = self.context.entity(ref.object)
        if entity is not None:
            return self._walk(self.context.lineage(entity), ref, macro)
        if self.context.credential(ref.object) is not None:
            return self._credential(ref.object, ref.attribute, ref.position, macro)
        known = [entity.name for entity in self.context.entities] + [c.name for c in self.context.credentials]
        raise MacroError(
            f"unknown object '{ref.object}': not an entity, a credential or one of {', '.join(ENTITY_KINDS)}"
            f"{did_you_mean(ref.object, known)}",
            ref.position,
            macro,
        )

    def _credential(self, name: str, attribute: str, position: int, macro: str | None) -> Resolution:
        credential = self.context.credential(name)
        if credential is None:
            raise MacroError(f"unknown credential '{name}'", position, macro)
        if attribute not in ("username", "secret"):
            raise MacroError(f"credential '{name}' has 'username' and 'secret', not '{attribute}'", position, macro)
        return Resolution(attribute, credential=credential)

    def _in_kind(self, ref: Ref, macro: str | None) -> Resolution:
        lineage = self.context.current_lineage()
        for index, entity in enumerate(lineage):
            if entity.kind == ref.object:
                return self._walk(lineage[index:], ref, macro)
        raise MacroError(
            f"no {ref.object} around {self.context.describe_current()}: '{ref.object}.{ref.attribute}' names nothing",
            ref.position,
            macro,
        )

    def _known_on(self, entity: Entity, attribute: str) -> bool:
        return attribute in entity.attributes or (entity.name, attribute) in self.runtime_names

    def _walk(self, lineage: Sequence[Entity], ref: Ref, macro: str | None) -> Resolution:
        for entity in lineage:
            if (entity.name, ref.attribute) in self.runtime_names:
                return Resolution(ref.attribute, entity=entity, runtime=True)
            if ref.attribute in entity.attributes:
                return Resolution(ref.attribute, entity=entity)
        raise self._unknown_attribute(lineage, ref, macro)

    def _unqualified(self, ref: Ref, macro: str | None) -> Resolution:
        namespaced = self._namespaced(ref.attribute)
        if namespaced is not None:
            return namespaced
        lineage = self.context.current_lineage()
        for entity in lineage:
            if (entity.name, ref.attribute) in self.runtime_names:
                return Resolution(ref.attribute, entity=entity, runtime=True)
            if ref.attribute in entity.attributes:
                return Resolution(ref.attribute, entity=entity)
        if (None, ref.attribute) in self.runtime_names:
            return Resolution(ref.attribute, runtime=True)
        meant = self._namespaced(ref.attribute, known_only=False)
        if meant is not None and meant.entity is not None:
            raise MacroError(
                f"'{ref.attribute}' names '{meant.attribute}' of {meant.entity.kind} {meant.entity.name}, "
                "which has no such attribute and no value set at run time",
                ref.position,
                macro,
            )
        raise self._unknown_attribute(lineage, ref, macro)

    def _namespaced(self, name: str, *, known_only: bool = True) -> Resolution | None:
        """``Kind_entity_attr`` (Calm's namespacing), if it names a known attribute of an entity of
        that kind. When entity names overlap (``web`` and ``web_db``), the longest one that knows the
        attribute wins. With `known_only` false, any attribute: to explain an error."""
        for kind in ENTITY_KINDS[1:]:
            prefix = f"{kind}_"
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            candidates = [
                entity
                for entity in self.context.entities
                if entity.kind == kind
                and rest.startswith(entity.name + "_")
                and len(rest) > len(entity.name) + 1
                and (not known_only or self._known_on(entity, rest[len(entity.name) + 1 :]))
            ]
            if candidates:
                entity = max(candidates, key=lambda candidate: len(candidate.name))
                attribute = rest[len(entity.name) + 1 :]
                return Resolution(attribute, entity=entity, runtime=(entity.name, attribute) in self.runtime_names)
        return None

    def _unknown_attribute(self, lineage: Sequence[Entity], ref: Ref, macro: str | None) -> MacroError:
        where = ", ".join(f"{entity.kind} {entity.name}" for entity in lineage) or "an empty context"
        known = {name for entity in lineage for name in entity.attributes}
        known |= {attribute for owner, attribute in self.runtime_names if owner is None}
        known |= {attribute for owner, attribute in self.runtime_names if any(e.name == owner for e in lineage)}
        what = f"attribute '{ref.attribute}' of '{ref.object}'" if ref.object else f"name '{ref.attribute}'"
        hint = did_you_mean(ref.attribute, known)
        return MacroError(f"unknown {what} (looked in {where}){hint}", ref.position, macro)


def bind(template: Template | str, context: MacroContext) -> Template:
    """The template with each `Ref` that reads a credential (``db.username``) rewritten as a `CredRef`.

    Parsing cannot tell them apart (same syntax); the context knows the credential names."""
    template = as_template(template)

    def rebuild(node: Node) -> Node:
        if isinstance(node, Ref):
            if (
                node.object is not None
                and node.object not in ENTITY_KINDS
                and context.entity(node.object) is None
                and context.credential(node.object) is not None
                and node.attribute in ("username", "secret")
            ):
                credential_field: CredentialField = "username" if node.attribute == "username" else "secret"
                return CredRef(node.object, credential_field, node.position)
            return node
        if isinstance(node, Call):
            return replace(node, args=tuple(rebuild(arg) for arg in node.args))
        if isinstance(node, Index):
            return replace(node, target=rebuild(node.target), index=rebuild(node.index))
        if isinstance(node, BinaryOp):
            return replace(node, left=rebuild(node.left), right=rebuild(node.right))
        return node

    parts = tuple(
        replace(part, expression=rebuild(part.expression)) if isinstance(part, Macro) else part
        for part in template.parts
    )
    return Template(parts, template.source)


def references(template: Template | str, *, context: MacroContext | None = None) -> list[Ref]:
    """Every ``Object.attribute`` and unqualified name the text reads, in text order.

    The compiler matches them against what the tasks of an action set (implicit dependencies).
    With a context, references to credentials are left out (they are not attributes anybody sets)."""
    found: list[Ref] = []
    for macro in as_template(template).macros:
        for node in walk(macro.expression):
            if not isinstance(node, Ref):
                continue
            if (
                context is not None
                and node.object is not None
                and context.entity(node.object) is None
                and context.credential(node.object) is not None
            ):
                continue
            found.append(node)
    return sorted(found, key=lambda ref: ref.position)


def check(
    template: Template | str,
    context: MacroContext,
    runtime_names: RuntimeNames = frozenset(),
) -> list[MacroError]:
    """The compile-time check: every reference resolves in the context or is set at run time.

    Returns every problem (empty when all is well), each at its position with its macro; the
    caller adds the task's name. Also checks the literal windows of calm_is_within."""
    resolver = Resolver(context, runtime_names)
    errors: list[MacroError] = []
    for macro in as_template(template).macros:
        for node in walk(macro.expression):
            if isinstance(node, Ref | CredRef):
                try:
                    resolver.resolve(node, macro.source)
                except MacroError as error:
                    errors.append(error)
            elif (
                isinstance(node, Call)
                and node.name == "calm_is_within"
                and all(isinstance(arg, StringLiteral) for arg in node.args)
            ):
                first, second = (arg.value for arg in node.args if isinstance(arg, StringLiteral))
                try:
                    within_window(first, second, node.position, macro.source)
                except MacroError as error:
                    errors.append(error)
    return sorted(errors, key=lambda error: error.position)
